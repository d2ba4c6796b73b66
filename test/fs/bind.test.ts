// FsAdapter.bind, the one decision both FUSE backends serve, without FUSE:
// a hand-made tree and a fake sample provider stand for the scan and the
// engine. The real-mount tests (adapter, redirection, native-server) cover
// the same behaviour through the kernel.
import { constants as fsConstants } from 'node:fs'
import pino from 'pino'
import t from 'tap'
import { SampleBuffers } from '../../src/chunks/sample-buffers'
import { DatasetTree, EntryKind, TreeBuilder, type FileReader, type OpenFile } from '../../src/chunks/tree'
import type { ServedFile } from '../../src/engine/engine'
import { FsError } from '../../src/errors'
import { FsAdapter } from '../../src/fs/adapter'
import type { FileId } from '../../src/redirect/layout'
import type { MountStats } from '../../src/stats'

/** A stat row as a listing gives it (src/chunks/native.ts, Listed): mode and size, the rest 0. */
const stat = (mode: number, size: number): number[] => [mode, size, 0, 0, 1, 0, 0, 0, 0, 0, 0]

function tree (): DatasetTree {
  const builder = new TreeBuilder()
  const root = builder.add(0, '', EntryKind.Directory, stat(0o40755, 4096))
  const cat = builder.add(root, 'cat', EntryKind.Directory, stat(0o40755, 4096))
  const a = builder.add(cat, 'a.jpg', EntryKind.Sample, stat(0o100644, 10))
  const b = builder.add(cat, 'b.jpg', EntryKind.Sample, stat(0o100644, 12))
  builder.add(root, 'labels.txt', EntryKind.Other, stat(0o100644, 5))
  const { columns, added } = builder.finish()
  const entryOf = (addedAs: number): number => added.indexOf(addedAs)
  return new DatasetTree(columns, [entryOf(a), entryOf(b)], undefined)
}

class FakeSamples {
  readonly opens: Array<{ sample: number, exact: boolean }> = []
  failWith?: Error
  async open (sample: number, options: { exact?: boolean } = {}): Promise<ServedFile> {
    this.opens.push({ sample, exact: options.exact === true })
    if (this.failWith !== undefined) throw this.failWith
    const served = (options.exact === true ? sample : 1 - sample) as FileId // redirected to the other file of the class
    return { file: served, bytes: Buffer.from(`sample ${served}`) }
  }

  readonly givenBack: number[] = []
  giveBack (served: ServedFile): void { this.givenBack.push(served.file) }
}

class FakeFiles implements FileReader {
  readonly opened: string[] = []
  async open (relativePath: string): Promise<OpenFile> {
    this.opened.push(relativePath)
    const bytes = Buffer.from('hello')
    return { read: async (buffer, length, position) => bytes.copy(buffer, 0, position, position + length), close: async () => {}, native: { bytes } }
  }
}

function adapter (samples = new FakeSamples(), files = new FakeFiles()): { fs: FsAdapter, samples: FakeSamples, files: FakeFiles } {
  const fs = new FsAdapter({ tree: tree(), files, statfsPath: '/', samples, buffers: new SampleBuffers(), log: pino({ level: 'silent' }), stats: () => ({ pid: 1 }) as unknown as MountStats, reset: () => ({ resets: 1 }) })
  return { fs, samples, files }
}

t.test("a sample's open is bound to the bytes the engine serves, which may be another file's", async t => {
  const { fs, samples } = adapter()
  const handle = await fs.bind('/cat/a.jpg', fsConstants.O_RDONLY)
  t.same(handle, { kind: 'bytes', entry: tree().find('cat/a.jpg'), bytes: Buffer.from('sample 1'), served: 1 })
  t.same(samples.opens, [{ sample: 0, exact: false }])
})

t.test('an exact open asks the engine for the file itself', async t => {
  const { fs, samples } = adapter()
  const handle = await fs.bind('/cat/b.jpg', fsConstants.O_RDONLY, { exact: true })
  t.match(handle, { kind: 'bytes', bytes: Buffer.from('sample 1') })
  t.same(samples.opens, [{ sample: 1, exact: true }])
})

t.test('a non-sample passes through to the file, and is counted', async t => {
  const { fs, samples, files } = adapter()
  const handle = await fs.bind('/labels.txt', fsConstants.O_RDONLY)
  t.equal(handle.kind, 'passthrough')
  t.same(files.opened, ['labels.txt'])
  t.same(samples.opens, [], 'the engine is not asked')
  t.equal(fs.counters.passthroughOpens, 1)
})

t.test('the stats file is bound to a snapshot of the stats', async t => {
  const { fs } = adapter()
  const handle = await fs.bind('/.redirfs/stats', fsConstants.O_RDONLY)
  t.match(handle, { kind: 'bytes' })
  t.same(JSON.parse((handle as { bytes: Buffer }).bytes.toString()), { pid: 1 })
})

const refusals: Array<[string, string, number, string]> = [
  ['a write open of a sample', '/cat/a.jpg', fsConstants.O_WRONLY, 'EROFS'],
  ['a read-write open of a non-sample', '/labels.txt', fsConstants.O_RDWR, 'EROFS'],
  ['a truncating open', '/labels.txt', fsConstants.O_RDONLY | fsConstants.O_TRUNC, 'EROFS'],
  ['an open of a missing path', '/cat/zebra.jpg', fsConstants.O_RDONLY, 'ENOENT'],
  ['an open of a directory', '/cat', fsConstants.O_RDONLY, 'EISDIR'],
  ['an open of the control directory', '/.redirfs', fsConstants.O_RDONLY, 'EISDIR']
]
for (const [what, path, flags, errno] of refusals) {
  t.test(`${what} fails with ${errno} and asks no one`, async t => {
    const { fs, samples, files } = adapter()
    const failure = await fs.bind(path, flags).then(() => undefined, (err: unknown) => err)
    t.ok(failure instanceof FsError && failure.errno === errno, `FsError ${errno}`)
    t.same([samples.opens, files.opened], [[], []])
  })
}

t.test("an engine's failure reaches the caller as it is, and only EIO is counted and logged as a failed open", async t => {
  const { fs, samples } = adapter()
  samples.failWith = new FsError('EIO', 'cannot read the data for cat/a.jpg')
  const failure = await fs.bind('/cat/a.jpg', fsConstants.O_RDONLY).catch((err: unknown) => err)
  t.equal(failure, samples.failWith)
  fs.noteFailedOpen('/cat/a.jpg', failure)
  fs.noteFailedOpen('/cat/zebra.jpg', new FsError('ENOENT', 'no such file'))
  t.equal(fs.counters.failedOpens, 1)
})

t.test('a sample whose opener went away before the answer reached it goes back to the engine', async t => {
  const { fs, samples } = adapter()
  const number = fs.handles.add(await fs.bind('/cat/a.jpg', fsConstants.O_RDONLY))
  await fs.abandon(number)
  t.same(samples.givenBack, [1], 'the file it was answered with')
  t.equal(fs.handles.size, 0)
})

t.test('a non-blocking open of the reset file resets, and reads back what was done', async t => {
  const { fs } = adapter()
  const handle = await fs.bind('/.redirfs/reset', fsConstants.O_RDONLY | fsConstants.O_NONBLOCK)
  t.match(handle, { kind: 'bytes', bytes: Buffer.from('{"resets":1}\n') })
})

t.test('a plain open of the reset file (a stray cat, a backup) is refused and resets nothing', async t => {
  const { fs } = adapter()
  await t.rejects(fs.bind('/.redirfs/reset', fsConstants.O_RDONLY), new FsError('EPERM', 'the reset file resets only when opened with O_NONBLOCK; run: redirfs reset <mountpoint>'))
  const handle = await fs.bind('/.redirfs/reset', fsConstants.O_RDONLY | fsConstants.O_NONBLOCK)
  t.match(handle, { kind: 'bytes', bytes: Buffer.from('{"resets":1}\n') }, 'the first reset is the deliberate one')
})

t.test('each sample open is told first, with the thread that opened it', async t => {
  const threads: (number | undefined)[] = []
  const samples = new FakeSamples()
  const fs = new FsAdapter({ tree: tree(), files: new FakeFiles(), statfsPath: '/', samples, buffers: new SampleBuffers(), log: pino({ level: 'silent' }), stats: () => ({ pid: 1 }) as unknown as MountStats, reset: () => ({}), beforeSampleOpen: thread => { threads.push(thread); return true } })
  await fs.bindEntry(tree().find('cat/a.jpg'), fsConstants.O_RDONLY, { thread: 4242 })
  await fs.bind('/labels.txt', fsConstants.O_RDONLY)
  t.same(threads, [4242], 'samples only')
})
