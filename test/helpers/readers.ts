// Reading a mount as a trainer does: every sample path once per epoch,
// in a random order, by several concurrent readers.
import { promises as fs } from 'node:fs'
import path from 'node:path'
import type { Test } from 'tap'
import { SeededRandom } from '../../src/redirect/random'
import { sha1, type GeneratedDataset } from './dataset'

export interface ReadSample {
  readonly opened: string
  readonly content: string
  /** What fstat reported on the open handle. */
  readonly statSize: number
  readonly length: number
}

export async function readFileAsTrainer (mountpoint: string, relative: string): Promise<ReadSample> {
  const handle = await fs.open(path.join(mountpoint, relative), 'r')
  try {
    const { size } = await handle.stat()
    const chunks: Buffer[] = []
    // Read in small pieces until EOF, as a decoder streaming the file would.
    for (let position = 0; ;) {
      const buffer = Buffer.alloc(1000)
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, position)
      if (bytesRead === 0) break
      chunks.push(buffer.subarray(0, bytesRead))
      position += bytesRead
    }
    const bytes = Buffer.concat(chunks)
    return { opened: relative, content: sha1(bytes), statSize: size, length: bytes.length }
  } finally {
    await handle.close()
  }
}

/**
 * A trainer's epoch boundary (the last batch's training step, the next
 * iterator) is longer than the mount's re-open window: within it, a thread
 * that opens the path it just read gets the same sample again, by design
 * (see docs/design.md, "Loaders"). Node's few pool threads reading back to
 * back would otherwise meet that rule at an epoch boundary.
 */
const EPOCH_BOUNDARY_MS = 120

export async function epochBoundary (): Promise<void> {
  await new Promise(resolve => setTimeout(resolve, EPOCH_BOUNDARY_MS))
}

export async function readEpoch (mountpoint: string, samples: readonly string[], seed: number, readers = 8): Promise<ReadSample[]> {
  await epochBoundary()
  const order = new SeededRandom(seed).shuffle([...samples])
  const results: ReadSample[] = []
  let next = 0
  await Promise.all(Array.from({ length: readers }, async () => {
    while (next < order.length) {
      const relative = order[next++]
      results.push(await readFileAsTrainer(mountpoint, relative))
    }
  }))
  return results
}

/**
 * Every sample read once by its path on a mount that serves exactly (off):
 * the damaged one is EIO; another of its chunk is EIO (read with it) or
 * intact (read later, checked file by file); every other sample intact.
 */
export async function checkDamagedChunk (t: Test, mountpoint: string, dataset: GeneratedDataset, damaged: string, inChunk: ReadonlySet<string>): Promise<void> {
  for (const relative of dataset.samples) {
    if (relative === damaged) {
      await t.rejects(readFileAsTrainer(mountpoint, relative), { code: 'EIO' }, `${relative} is damaged`)
    } else if (inChunk.has(relative)) {
      const read = await readFileAsTrainer(mountpoint, relative).catch((err: NodeJS.ErrnoException) => err.code)
      t.ok(read === 'EIO' || (typeof read === 'object' && dataset.byContent.get(read.content) === relative), `${relative}, of the damaged chunk: EIO or intact`)
    } else {
      t.equal(dataset.byContent.get((await readFileAsTrainer(mountpoint, relative)).content), relative)
    }
  }
}
