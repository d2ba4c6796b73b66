// Packing reads the next chunk while it writes the one before: a read that
// fails meanwhile is the pack's one-line error when its turn comes, never an
// unhandled rejection that kills the process and leaves a partial pack.
import { promises as fs, readdirSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { UsageError } from '../../src/errors'
import { directoryInput, writePack } from '../../src/pack/writer'
import { generateDataset } from '../helpers/dataset'
import { emptyDir } from '../helpers/mount'

t.test('a chunk that cannot be read while the one before is written fails the pack in one line, nothing left behind', async t => {
  const dataset = generateDataset(14)
  const work = emptyDir('redirfs-writer-')
  t.teardown(async () => {
    await fs.rm(dataset.root, { recursive: true, force: true })
    await fs.rm(work, { recursive: true, force: true })
  })
  for (const layout of ['class', 'shared'] as const) {
    const input = await directoryInput(dataset.root, {})
    let reads = 0
    // The third chunk's read fails at once, while the second is being written.
    const failing = { ...input, read: async (entries: readonly number[], buffers: Parameters<typeof input.read>[1]) => { if (++reads === 3) throw new UsageError('cannot read one file: Permission denied'); return await input.read(entries, buffers) } }
    await t.rejects(writePack(failing, path.join(work, `pack-${layout}`), { chunkSize: 2, seed: 1, layout }), new UsageError('cannot read one file: Permission denied'), `${layout} layout`)
    t.same(readdirSync(work), [], `${layout} layout: no pack, no partial pack`)
  }
})
