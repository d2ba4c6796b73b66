/**
 * Where `redirfs pack` writes: a directory, or a bucket prefix
 * (src/s3/pack-output.ts). Either way a pack is never seen half-written:
 *
 * - in a directory, everything goes into `<out>.partial-<pid>`, is fsynced,
 *   and only then renamed to `<out>`; an interrupted pack leaves no `<out>`,
 *   and a partial directory has no index that could pass for a pack;
 * - in a bucket, the index is the last object written: a prefix without
 *   one is not a pack (and a failed upload removes what it wrote).
 *
 * Files are written front to back (segments, others.bin), so a bucket
 * takes them as multipart uploads of a few parts in memory at a time.
 */
import { promises as fs } from 'node:fs'
import path from 'node:path'
import { describeSystemError, UsageError } from '../errors'
import { INDEX_FILE } from './storage'

/** A file being written, front to back. */
export interface OutputFile {
  write (bytes: Buffer): Promise<void>
  /** Everything written is durable (a directory: fsynced; a bucket: the object exists). */
  close (): Promise<void>
}

export interface PackOutput {
  /** Where it goes, for messages: a directory, or s3://bucket/prefix. */
  readonly where: string
  /**
   * Checks that nothing is there yet, and makes room; a UsageError that says
   * why not. `private`: some of the data is not for everyone (a file others
   * may not read, or a directory they may not pass), so neither is the pack.
   */
  begin (options: { private: boolean }): Promise<void>
  /** A pack inside this one (a shard, node-<i>); begun with it. */
  inside (name: string): Promise<PackOutput>
  create (name: string): Promise<OutputFile>
  /** Writes the index, last of all the pack's files. */
  writeIndex (bytes: Buffer): Promise<void>
  /** The pack is complete: it appears at `where`. */
  commit (): Promise<void>
  /** Something failed: nothing that could pass for a pack is left. */
  abort (): Promise<void>
}

/** A pack of private data is its owner's only: directories 0700 and files 0600, whatever the umask. */
const PRIVATE = { directory: 0o700, file: 0o600 }
const SHARED = { directory: 0o777, file: 0o666 }

export class DirectoryOutput implements PackOutput {
  private readonly partial: string
  private modes = SHARED

  constructor (readonly where: string, private readonly root?: string) {
    this.partial = root ?? `${where}.partial-${process.pid}`
  }

  async begin (options: { private: boolean }): Promise<void> {
    if (await fs.stat(this.where).then(() => true, () => false)) throw new UsageError(`${this.where} already exists; remove it or choose another output`)
    if (!(await fs.stat(path.dirname(this.where)).then(s => s.isDirectory(), () => false))) throw new UsageError(`the directory of ${this.where} does not exist`)
    this.modes = options.private ? PRIVATE : SHARED
    await fs.mkdir(this.partial, this.modes.directory).catch((err: unknown) => { throw new UsageError(`cannot write the pack ${this.where}: ${describeSystemError(err)}`, { cause: err }) })
    // mkdir's mode passes through the umask, which can only narrow it; chmod makes 0700 exact.
    if (options.private) await fs.chmod(this.partial, PRIVATE.directory)
  }

  async inside (name: string): Promise<PackOutput> {
    const root = path.join(this.partial, name)
    await fs.mkdir(root, this.modes.directory)
    const shard = new DirectoryOutput(path.join(this.where, name), root)
    shard.modes = this.modes
    return shard
  }

  async create (name: string): Promise<OutputFile> {
    const file = path.join(this.partial, name)
    await fs.mkdir(path.dirname(file), { recursive: true, mode: this.modes.directory })
    const handle = await fs.open(file, 'w', this.modes.file)
    let position = 0
    return {
      write: async bytes => {
        await handle.write(bytes, 0, bytes.length, position)
        position += bytes.length
      },
      close: async () => {
        await handle.sync()
        await handle.close()
        await syncDirectory(path.dirname(file))
      }
    }
  }

  async writeIndex (bytes: Buffer): Promise<void> {
    const index = await this.create(INDEX_FILE)
    await index.write(bytes)
    await index.close()
  }

  async commit (): Promise<void> {
    if (this.root !== undefined) return // a shard appears with the pack it is in
    await syncDirectory(this.partial)
    await fs.rename(this.partial, this.where)
    await syncDirectory(path.dirname(this.where))
  }

  async abort (): Promise<void> {
    if (this.root === undefined) await fs.rm(this.partial, { recursive: true, force: true })
  }
}

async function syncDirectory (directory: string): Promise<void> {
  const handle = await fs.open(directory, 'r')
  try { await handle.sync() } finally { await handle.close() }
}
