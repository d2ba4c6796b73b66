// The scan at mount, on real directories: what the tree shows of each
// entry is what stat(2) says of it (links followed), and every entry it
// cannot serve is named with the reason.
import { execFileSync } from 'node:child_process'
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { scanTree } from '../../src/chunks/scan'
import type { DatasetTree, EntryAttributes } from '../../src/chunks/tree'
import { UsageError } from '../../src/errors'
import { loadPackIndex } from '../../src/pack/pack-index'
import { emptyDir } from '../helpers/mount'
import { denyNobodyByAcl, NOBODY, openToEveryone, redirfsAsNobody } from '../helpers/unprivileged'

const pathsOf = (tree: DatasetTree): string[] => Array.from({ length: tree.count }, (_, entry) => tree.pathOf(entry)).sort()
const has = (tree: DatasetTree, relative: string): boolean => tree.find(relative) >= 0
const childrenOf = (tree: DatasetTree, relative: string): string[] | undefined => tree.childNames(tree.find(relative))
const attributesOf = (tree: DatasetTree, relative: string): EntryAttributes => tree.attributes(tree.find(relative))

function makeTree (): string {
  const root = mkdtempSync(path.join(os.tmpdir(), 'redirfs-scan-'))
  for (const c of ['cat', 'dog']) {
    mkdirSync(path.join(root, c))
    for (let i = 0; i < 3; i++) writeFileSync(path.join(root, c, `${i}.jpg`), Buffer.alloc(100 + i, i))
  }
  writeFileSync(path.join(root, 'README.txt'), 'not a sample')
  writeFileSync(path.join(root, 'cat', 'empty.jpg'), '')
  symlinkSync(path.join(root, 'dog', '0.jpg'), path.join(root, 'cat', 'linked.jpg'))
  execFileSync('touch', ['-d', '2020-01-02 03:04:05.123456789', path.join(root, 'dog', '1.jpg')])
  return root
}

t.test('each entry has the attributes stat gives, nanoseconds and followed links included', async t => {
  const root = makeTree()
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  const tree = await scanTree(root)
  const relatives = pathsOf(tree)
  t.same(relatives, ['', 'README.txt', 'cat', 'cat/0.jpg', 'cat/1.jpg', 'cat/2.jpg', 'cat/empty.jpg', 'cat/linked.jpg', 'dog', 'dog/0.jpg', 'dog/1.jpg', 'dog/2.jpg'])
  for (const relative of relatives) {
    const stat = statSync(path.join(root, relative), { bigint: true })
    const a = attributesOf(tree, relative)
    t.same([a.mode, a.size, a.uid, a.gid, a.nlink], [stat.mode, stat.size, stat.uid, stat.gid, stat.nlink].map(Number), `${relative}: mode, size, owner, links`)
    // A directory's atime moves when the scan lists it.
    const times = stat.isDirectory() ? [a.mtimeNsec, a.ctimeNsec] : [a.atimeNsec, a.mtimeNsec, a.ctimeNsec]
    t.same(times, (stat.isDirectory() ? [stat.mtimeNs, stat.ctimeNs] : [stat.atimeNs, stat.mtimeNs, stat.ctimeNs]).map(ns => Number(ns % 1_000_000_000n)), `${relative}: nanoseconds`)
    t.equal(Math.floor(a.mtimeMs / 1000), Number(stat.mtimeNs / 1_000_000_000n), `${relative}: seconds`)
  }
  t.equal(attributesOf(tree, 'dog/1.jpg').mtimeNsec, 123456789)
  t.same(childrenOf(tree, 'cat'), ['0.jpg', '1.jpg', '2.jpg', 'empty.jpg', 'linked.jpg'])
})

t.test('samples are the non-empty files with a sample extension inside a directory', async t => {
  const root = makeTree()
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  const tree = await scanTree(root)
  t.same(tree.samples.map(s => [s.path, s.size, s.group]), [
    ['cat/0.jpg', 100, 'cat'], ['cat/1.jpg', 101, 'cat'], ['cat/2.jpg', 102, 'cat'], ['cat/linked.jpg', 100, 'cat'],
    ['dog/0.jpg', 100, 'dog'], ['dog/1.jpg', 101, 'dog'], ['dog/2.jpg', 102, 'dog']])
})

t.test('a broken link, a special file and a name that is not UTF-8 fail the scan, named, or are left out on request', async t => {
  const root = makeTree()
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  symlinkSync(path.join(root, 'nowhere.jpg'), path.join(root, 'cat', 'broken.jpg'))
  execFileSync('mkfifo', [path.join(root, 'dog', 'pipe.jpg')])
  writeFileSync(Buffer.concat([Buffer.from(path.join(root, 'dog') + '/'), Buffer.from([0x66, 0xff, 0x2e, 0x6a, 0x70, 0x67])]), 'x')
  await t.rejects(scanTree(root), new UsageError('3 entries of the source cannot be served: cat/broken.jpg (broken symbolic link), dog/f\\xff.jpg (name is not valid UTF-8), dog/pipe.jpg (not a regular file or directory); fix or remove them, or pass --skip-unservable to leave them out'))
  const warnings: string[] = []
  const tree = await scanTree(root, { skipUnservable: true, onWarning: message => warnings.push(message) })
  t.same(tree.skipped.map(s => s.path).sort(), ['cat/broken.jpg', 'dog/f\\xff.jpg', 'dog/pipe.jpg'])
  t.equal(warnings.length, 3)
  t.equal(tree.samples.length, 7)
  t.notOk(has(tree, 'cat/broken.jpg'))
})

t.test('a sample the scanning user may not read fails the scan, named, or is left out on request', async t => {
  // Run as nobody, through `redirfs pack` (the same scan as a mount's): root may read everything.
  const root = makeTree()
  const out = emptyDir('redirfs-scan-out-')
  t.teardown(() => { for (const dir of [root, out]) rmSync(dir, { recursive: true, force: true }) })
  openToEveryone(root)
  chownSync(out, NOBODY, NOBODY)
  chmodSync(path.join(root, 'cat', '1.jpg'), 0o600)
  denyNobodyByAcl(path.join(root, 'dog', '2.jpg'), 0o644)
  const refused = await redirfsAsNobody('pack', root, path.join(out, 'refused'))
  t.equal(refused.code, 1)
  t.equal(refused.stderr, 'redirfs: 2 entries of the source cannot be served: cat/1.jpg (a sample this user (uid 65534) may not read), ' +
    'dog/2.jpg (a sample this user (uid 65534) may not read); fix or remove them, or pass --skip-unservable to leave them out\n')
  const packed = await redirfsAsNobody('pack', root, path.join(out, 'packed'), '--skip-unservable')
  t.equal(packed.code, 0, packed.stderr)
  t.match(packed.stderr, 'left out cat/1.jpg: a sample this user (uid 65534) may not read')
  t.match(packed.stdout, /packed 5 samples in 2 groups/, 'the 7 samples less the 2 it may not read')
  // Samples an include list leaves out are not the scan's concern, readable or not.
  const include = path.join(out, 'include.txt')
  writeFileSync(include, 'cat/0.jpg\ndog/0.jpg\ndog/1.jpg\n')
  const subset = await redirfsAsNobody('pack', root, path.join(out, 'subset'), '--include', include)
  t.equal(subset.code, 0, subset.stderr)
  t.match(subset.stdout, /packed 3 samples in 2 groups/)
})

t.test('a class none of whose samples the scanning user may read is left out whole, not shown empty (ImageFolder refuses an empty class)', async t => {
  const root = makeTree()
  const out = emptyDir('redirfs-scan-out-')
  t.teardown(() => { for (const dir of [root, out]) rmSync(dir, { recursive: true, force: true }) })
  mkdirSync(path.join(root, 'owl'))
  writeFileSync(path.join(root, 'owl', '0.jpg'), 'owl')
  openToEveryone(root)
  chownSync(out, NOBODY, NOBODY)
  chmodSync(path.join(root, 'owl', '0.jpg'), 0o600)
  const packed = await redirfsAsNobody('pack', root, path.join(out, 'packed'), '--skip-unservable')
  t.equal(packed.code, 0, packed.stderr)
  t.match(packed.stderr, 'left out owl/0.jpg: a sample this user (uid 65534) may not read')
  t.match(packed.stdout, /packed 7 samples in 2 groups/)
  t.notOk(has((await loadPackIndex(path.join(out, 'packed'))).tree, 'owl'), 'the pack has no empty owl directory')
})

t.test('with an include list, samples not on it are hidden and non-samples stay', async t => {
  const root = makeTree()
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  const tree = await scanTree(root, { include: new Set(['cat/1.jpg', 'dog/2.jpg']) })
  t.same(tree.samples.map(s => s.path), ['cat/1.jpg', 'dog/2.jpg'])
  t.same(childrenOf(tree, 'cat'), ['1.jpg', 'empty.jpg'])
  t.ok(has(tree, 'README.txt'))
})

t.test('an include list line that names nothing the mount can show is named, never dropped in silence', async t => {
  const root = makeTree()
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  const include = new Set(['cat/1.jpg', '../outside.jpg', '/etc/passwd', 'cat/missing.jpg', 'cat/empty.jpg'])
  await t.rejects(scanTree(root, { include }), new UsageError('4 entries of the source or the include list cannot be served: ' +
    'include list: ../outside.jpg (not a plain relative path (it has "..", "." or an empty part)), include list: /etc/passwd (an absolute path: the include list names paths relative to the source), ' +
    'include list: cat/empty.jpg (not a sample of the source (missing, empty, or not a sample extension)), and 1 more; fix or remove them, or pass --skip-unservable to leave them out'))
  const warnings: string[] = []
  const tree = await scanTree(root, { include, skipUnservable: true, onWarning: w => warnings.push(w) })
  t.same(tree.samples.map(s => s.path), ['cat/1.jpg'])
  t.equal(tree.skipped.length, 4, 'counted as left out')
  t.equal(warnings.length, 4)
})

// Found by the include list fuzzer (fuzz/include-list.fuzz.ts): a line of kilobytes made a refusal of kilobytes, and a carriage return broke it.
t.test('an include list line is named in a refusal cut short and with its control characters written out', async t => {
  const root = makeTree()
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  const long = `cat/${'x'.repeat(5000)}.jpg`
  const err = await scanTree(root, { include: new Set([long, 'cat/a\rb.jpg']) }).then(() => new Error('accepted'), (e: unknown) => e as Error)
  t.type(err, UsageError)
  t.match(err.message, /^2 entries of the source or the include list cannot be served: include list: cat\/a\\u000db\.jpg \(not a sample/)
  t.match(err.message, /include list: cat\/x{50,}\.\.\. \(not a sample/)
  t.ok(err.message.length < 500, `${err.message.length} characters`)
})

t.test('with an include list, a class whose samples are all left out is hidden; a directory that never held samples stays', async t => {
  const root = makeTree()
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  mkdirSync(path.join(root, 'docs'))
  writeFileSync(path.join(root, 'docs', 'notes.txt'), 'no samples here')
  const tree = await scanTree(root, { include: new Set(['cat/1.jpg', 'cat/2.jpg']) })
  t.notOk(has(tree, 'dog'), 'an empty class would make ImageFolder refuse the root')
  t.ok(has(tree, 'docs/notes.txt'))
  t.ok(has(tree, 'README.txt'))
})

t.test('a source with no samples is refused, saying what was looked for', async t => {
  const root = mkdtempSync(path.join(os.tmpdir(), 'redirfs-scan-'))
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  writeFileSync(path.join(root, 'a.jpg'), 'at the root: in no class')
  await t.rejects(scanTree(root), { message: /^no sample files found \(looked for \.jpg / })
})

t.test('a link back to a directory it is in is named as a loop, not followed; a link to another directory is followed', async t => {
  const root = makeTree()
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  symlinkSync('..', path.join(root, 'cat', 'up'))
  symlinkSync(path.join(root, 'dog'), path.join(root, 'cat', 'dogs'))
  await t.rejects(scanTree(root), new UsageError('1 entry of the source cannot be served: cat/up (a symbolic link back to a directory it is in, a loop); fix or remove it, or pass --skip-unservable to leave it out'))
  const tree = await scanTree(root, { skipUnservable: true })
  t.same(childrenOf(tree, 'cat/dogs'), ['0.jpg', '1.jpg', '2.jpg'])
  t.notOk(has(tree, 'cat/up'))
})

t.test('below a link out of the source, no system directory is walked: each is named and left out', async t => {
  const root = makeTree()
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  symlinkSync('/var', path.join(root, 'var'))
  const tree = await scanTree(root, { skipUnservable: true })
  const left = tree.skipped.filter(entry => entry.path.startsWith('var/')).map(entry => entry.path)
  t.ok(left.includes('var/lib'), 'var/lib (/var/lib)')
  t.ok(left.includes('var/log'), 'var/log (/var/log)')
  t.match(tree.skipped.find(entry => entry.path === 'var/lib')?.why, /into \/var\/lib, a system directory \(\/var\/lib\)/)
  t.notOk(has(tree, 'var/lib') || has(tree, 'var/log') || has(tree, 'var/cache'), 'none of them is in the tree')
})

t.test('a .redirfs at the root of the source is refused: the mount keeps that name for its control files', async t => {
  const root = makeTree()
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  mkdirSync(path.join(root, '.redirfs'))
  await t.rejects(scanTree(root), /1 entry of the source cannot be served: \.redirfs \(the mount keeps this name at its root for its control files\)/)
  t.notOk(has(await scanTree(root, { skipUnservable: true }), '.redirfs'))
})
