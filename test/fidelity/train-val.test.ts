// Redirect groups on real mounts with real PyTorch: a root holding train/
// and val/ (the layout of every ImageNet copy) read as ImageFolder(<mnt>/train)
// and ImageFolder(<mnt>/val), and a class made of many small sub-directories
// with --group-depth. Every label right, every sample once per split per epoch.
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { emptyDir, mount, redirfs } from '../helpers/mount'
import { checkEpochs, generateTorchDataset, runReader } from '../helpers/torch'

const work = mkdtempSync(path.join(os.tmpdir(), 'redirfs-groups-'))
t.teardown(() => rmSync(work, { recursive: true, force: true }))

interface SplitEpoch { train: string[], trainWrongLabels: number, val: string[] | null, valWrongLabels: number }

const splits = generateTorchDataset(path.join(work, 'splits'), 'splits')
const videos = generateTorchDataset(path.join(work, 'videos'), 'videos')

for (const mode of ['strict', 'pool', 'mix']) {
  for (const valEvery of [1, 2]) {
    t.test(`${mode}: a train/val root, validation every ${valEvery === 1 ? 'epoch' : 'other epoch'}: labels right, each split exactly once per epoch`, async t => {
      const { root, table, identities } = await splits
      const mountpoint = emptyDir()
      // About a third of the samples' bytes: the groups must share memory.
      await mount(t, root, mountpoint, '--memory', '200K', '--chunk-size', '2', '--redirect', mode, '--seed', '3')
      const { epochs } = await runReader<{ epochs: SplitEpoch[] }>('splits', mountpoint, table, '--epochs', '3', '--val-every', String(valEvery), '--workers', '2')
      t.equal(epochs.length, 3)
      epochs.forEach((epoch, e) => {
        t.equal(epoch.trainWrongLabels, 0, `epoch ${e}: no wrong train label`)
        t.same([...epoch.train].sort(), identities('train/'), `epoch ${e}: every train sample exactly once`)
        if (e % valEvery === 0) {
          t.equal(epoch.valWrongLabels, 0, `epoch ${e}: no wrong val label`)
          t.same([...epoch.val!].sort(), identities('val/'), `epoch ${e}: every val sample exactly once`)
        } else {
          t.equal(epoch.val, null, `epoch ${e}: no validation`)
        }
      })
      const stats = await readStats(mountpoint)
      t.ok(stats.protocol.redirects > 0, 'redirection was at work')
      t.ok(stats.layout.someGroups.every((group: string) => /^(train|val)\/[a-z]+(\/nested)?$/.test(group)), `groups are split/class directories: ${stats.layout.someGroups.join(', ')}`)
    })
  }
}

t.test('the mount line names the groups of a train/val root, not the splits', async t => {
  const { root } = await splits
  const mountpoint = emptyDir()
  t.teardown(async () => { await redirfs('umount', '--force', mountpoint) })
  const result = await redirfs('mount', root, mountpoint, '--memory', '200K', '--chunk-size', '2')
  t.equal(result.code, 0, result.stderr)
  t.match(result.stdout, /: 252 samples in 30 groups \(train\/ant, [^)]*val\/[a-z/]+, …\)/)
})

t.test('a class of many one- and two-frame video directories: too small for --memory in strict, and the error says why and what to do', async t => {
  const { root } = await videos
  const result = await redirfs('mount', root, emptyDir(), '--memory', '100K', '--chunk-size', '4', '--redirect', 'strict')
  t.not(result.code, 0)
  t.match(result.stderr, /--memory 100\.0 KiB is too small: the samples fall into \d+ redirect groups \(the directory holding each sample; e\.g\. ant\/video00, /)
  t.match(result.stderr, /\d+ of them of 1-2 files/)
  t.match(result.stderr, /or --group-depth N if/)
})

t.test('the same memory in mix (the default): the shared layout serves every video directory as its own class, labels right, every frame once per epoch', async t => {
  const { root, table, identities } = await videos
  const mountpoint = emptyDir()
  const result = await redirfs('mount', root, mountpoint, '--memory', '100K', '--chunk-size', '4')
  t.teardown(async () => { await redirfs('umount', '--force', mountpoint) })
  t.equal(result.code, 0, result.stderr)
  t.match(result.stdout, /; mix, chunks shared by the groups \(the shared layout: memory for a few files per group, not a chunk of each\); log /, 'the mount line says which layout')
  const report = await runReader('read', mountpoint, table, '--workers', '2', '--epochs', '3')
  checkEpochs(t, report.epochs, identities())
  const stats = await readStats(mountpoint)
  t.equal(stats.layout.kind, 'shared')
  t.ok(stats.protocol.redirects > 0, 'redirection was at work')
  t.ok(stats.protocol.peakResidentBytes <= 100 * 1024, `peak ${stats.protocol.peakResidentBytes} bytes of samples within --memory`)
})

t.test('--group-depth 1 groups the frames of a class together: labels right, every frame once per epoch', async t => {
  const { root, table, identities } = await videos
  const mountpoint = emptyDir()
  const result = await redirfs('mount', root, mountpoint, '--memory', '100K', '--chunk-size', '4', '--redirect', 'pool', '--group-depth', '1')
  t.teardown(async () => { await redirfs('umount', '--force', mountpoint) })
  t.equal(result.code, 0, result.stderr)
  t.match(result.stdout, /: 190 samples in 8 groups \(ant, /)
  const report = await runReader('read', mountpoint, table, '--workers', '2', '--epochs', '3')
  checkEpochs(t, report.epochs, identities())
  t.ok((await readStats(mountpoint)).protocol.redirects > 0, 'redirection was at work')
})
