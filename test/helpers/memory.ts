// What the memory tests share: a tree of large samples (bytes kept past
// their release show within a few epochs), a process's peak RSS, and the
// overhead the README states on top of the budgets.
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'

export const MiB = 2 ** 20

/** The README's overhead for one node: the runtime (Node, and the JS heap V8 may fill before it collects), plus the tree per file; a cluster node adds about 40 MiB for gRPC. */
export const overheadBytes = (files: number, cluster = false): number => (cluster ? 200 : 160) * MiB + 1536 * files

/** 4 classes x 60 samples of 100 KiB, each sample's bytes its own; the caller removes `root`. */
export function largeSampleTree (prefix: string): { root: string, samples: string[], bytes: number } {
  const root = mkdtempSync(path.join(os.tmpdir(), prefix))
  const samples: string[] = []
  for (let c = 0; c < 4; c++) {
    mkdirSync(path.join(root, `class${c}`))
    for (let i = 0; i < 60; i++) {
      const relative = `class${c}/img${i}.jpg`
      writeFileSync(path.join(root, relative), Buffer.alloc(100 * 1024, c * 64 + (i % 64)))
      samples.push(relative)
    }
  }
  return { root, samples, bytes: samples.length * 100 * 1024 }
}

/** A process's peak resident set (VmHWM). */
export const peakRss = (pid: number): number => Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmHWM:\s+(\d+) kB/)![1]) * 1024
