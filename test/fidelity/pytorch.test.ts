// Unmodified torchvision ImageFolder + DataLoader over real mounts: every
// (sample, label) pair right, every sample exactly once per epoch, with
// worker processes, persistent workers and DistributedSampler over 2 ranks
// (the loaders users reach for: loaders.test.ts).
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t, { type Test } from 'tap'
import { emptyDir, mount } from '../helpers/mount'
import { checkEpochs, generateTorchDataset, runReader, type ReaderReport } from '../helpers/torch'

const work = mkdtempSync(path.join(os.tmpdir(), 'redirfs-torch-'))
t.teardown(() => rmSync(work, { recursive: true, force: true }))
const dataset = generateTorchDataset(path.join(work, 'flat'))

async function readMount (mountpoint: string, ...args: string[]): Promise<ReaderReport> {
  return await runReader('read', mountpoint, (await dataset).table, ...args)
}

async function freshMount (t: Test, mode: string): Promise<string> {
  const mountpoint = emptyDir()
  // About 40% of the ~460 KB dataset (its ~15 groups need one chunk each), so redirection has work to do.
  await mount(t, (await dataset).root, mountpoint, '--memory', '200K', '--chunk-size', '4', '--redirect', mode, '--seed', '1')
  return mountpoint
}

for (const mode of ['strict', 'pool', 'mix']) {
  t.test(`${mode}: ImageFolder + DataLoader(shuffle, 4 workers), 3 epochs`, async t => {
    const report = await readMount(await freshMount(t, mode), '--workers', '4', '--epochs', '3')
    t.equal(report.epochs.length, 3)
    checkEpochs(t, report.epochs, (await dataset).identities())
  })

  t.test(`${mode}: persistent_workers=True, 3 epochs`, async t => {
    // With some end-of-epoch work, as training has: a worker that opened a path last in one epoch and
    // opens it first in the next, with nothing in between, would get the same bytes (README, "Which loaders work").
    const report = await readMount(await freshMount(t, mode), '--workers', '4', '--epochs', '3', '--persistent', '--epoch-pause', '0.2')
    checkEpochs(t, report.epochs, (await dataset).identities())
  })

  t.test(`${mode}: DistributedSampler over 2 ranks reading one mount: the union is every sample once per epoch`, async t => {
    const mountpoint = await freshMount(t, mode)
    const port = String(29500 + Math.floor(Math.random() * 1000))
    const ranks = await Promise.all([0, 1].map(async rank =>
      await readMount(mountpoint, '--workers', '2', '--epochs', '3', '--world', '2', '--rank', String(rank), '--port', port)))
    for (let e = 0; e < 3; e++) {
      t.equal(ranks[0].epochs[e].wrongLabels + ranks[1].epochs[e].wrongLabels, 0, `epoch ${e}: no wrong label on either rank`)
      t.same([...ranks[0].epochs[e].received, ...ranks[1].epochs[e].received].sort(), (await dataset).identities(), `epoch ${e}: union is every sample once`)
    }
  })
}
