/**
 * The dataset tree a mount presents, whether it came from scanning a
 * directory or from a pack's index: every entry's attributes, each
 * directory's children, and which files are samples.
 */
import type { SampleFile } from '../redirect/layout'

export interface EntryAttributes {
  readonly mode: number
  readonly size: number
  readonly uid: number
  readonly gid: number
  readonly nlink: number
  /** Times in milliseconds (what Date and fuse-native take), and the nanoseconds within their second, exact. */
  readonly atimeMs: number
  readonly mtimeMs: number
  readonly ctimeMs: number
  readonly atimeNsec: number
  readonly mtimeNsec: number
  readonly ctimeNsec: number
}

/** Whole seconds of a time given as `EntryAttributes` does (exact: the nanoseconds are subtracted before rounding). */
export function secondsOf (ms: number, nsec: number): number {
  return Math.round((ms - nsec / 1e6) / 1000)
}

export interface TreeEntry {
  readonly attributes: EntryAttributes
  /** Names inside a directory, sorted; undefined for files. */
  readonly children?: string[]
  /** Index into `samples` when the file is a sample. */
  sample?: number
}

export interface DatasetTree {
  /** Keyed by relative path: '' is the root, 'cat/001.jpg' a file. */
  readonly entries: Map<string, TreeEntry>
  /** Sorted by path. */
  readonly samples: SampleFile[]
  /** Entries of the source left out because the mount cannot serve them (`--skip-unservable`). */
  readonly skipped: readonly SkippedEntry[]
}

export interface SkippedEntry {
  /** Relative path; bytes that are not UTF-8 shown as \xNN. */
  readonly path: string
  readonly why: string
}

/** An open non-sample file, served exactly. */
export interface OpenFile {
  read (buffer: Buffer, length: number, position: number): Promise<number>
  close (): Promise<void>
  /** For the native FUSE server, which reads without JS: the open descriptor, or the whole bytes. */
  readonly native: { fd: number } | { bytes: Buffer }
}

/** Where the bytes of non-sample files come from. */
export interface FileReader {
  open (relativePath: string): Promise<OpenFile>
}
