// The source watch on a real directory and real inotify: which directories
// it vouches for, so that a load need not stat them again, and which
// changes an open sees (src/chunks/source-watch.ts, source-check.ts).
import { chmodSync, linkSync, mkdirSync, mkdtempSync, promises as fs, realpathSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pino from 'pino'
import t, { type Test } from 'tap'
import { scanTree } from '../../src/chunks/scan'
import { SourceCheck, type Refusal } from '../../src/chunks/source-check'
import { SourceWatch } from '../../src/chunks/source-watch'

/** A check that waits for `gate` after it has looked: a check still running when the source changes. */
class GatedCheck extends SourceCheck {
  gate: Promise<void> = Promise.resolve()
  /** Checks that have looked at the source. */
  looked = 0
  override async entryRefusal (entry: number, options: { linked: boolean }): Promise<Refusal | undefined> {
    const refusal = await super.entryRefusal(entry, options)
    this.looked++
    await this.gate
    return refusal
  }
}

interface Watched { base: string, root: string, find: (relative: string) => number, check: GatedCheck, watch: SourceWatch }

/**
 * A source of two classes at `<base>/a/src`, scanned, then watched;
 * `between` runs between the two. `hardLink`: cat/0.jpg has another name
 * in `<base>`.
 */
async function watched (t: Test, { between = () => {}, hardLink = false, linkedCat = false }: { between?: (root: string) => void, hardLink?: boolean, linkedCat?: boolean } = {}): Promise<Watched> {
  const base = mkdtempSync(path.join(os.tmpdir(), 'redirfs-watch-'))
  t.teardown(() => rmSync(base, { recursive: true, force: true }))
  // Open to everyone, as a dataset's directories usually are: the mount shows what the path lets through.
  chmodSync(base, 0o755)
  const root = path.join(base, 'a', 'src')
  for (const c of ['cat', 'dog']) {
    mkdirSync(path.join(root, c), { recursive: true })
    for (let i = 0; i < 2; i++) writeFileSync(path.join(root, c, `${i}.jpg`), Buffer.alloc(10, i))
  }
  if (hardLink) linkSync(path.join(root, 'cat', '0.jpg'), path.join(base, 'elsewhere.jpg'))
  if (linkedCat) {
    mkdirSync(path.join(base, 'outside'))
    renameSync(path.join(root, 'cat'), path.join(base, 'outside', 'cat'))
    symlinkSync(path.join(base, 'outside', 'cat'), path.join(root, 'cat'))
  }
  // As the daemon reads it: through a descriptor opened before the scan.
  const directory = await fs.open(root, 'r')
  t.teardown(async () => await directory.close())
  const sourceRoot = `/proc/self/fd/${directory.fd}`
  const tree = await scanTree(sourceRoot)
  between(root)
  const check = new GatedCheck(sourceRoot, tree, realpathSync(root), false)
  const watch = await SourceWatch.start(tree, check, realpathSync(root), pino({ level: 'silent' }))
  t.teardown(() => watch.close())
  return { base, root, find: relative => tree.find(relative), check, watch }
}

t.test('a load looks again at every directory until an open has checked it since the watch began: a change before the watch raised no event', async t => {
  // Closed after the scan, before the watch began: nothing says so but a look.
  const { find, check, watch } = await watched(t, { between: root => chmodSync(path.join(root, 'cat'), 0o700) })
  t.notOk(watch.unchangedDirectories()(find('cat')), 'cat is not vouched for before its first check')
  const refusing = await check.directoriesRefusing([find('cat/0.jpg')], watch.unchangedDirectories())
  t.match(refusing(find('cat/0.jpg')), { errno: 'EACCES' }, 'so the load refuses its files')
  t.match(await watch.refusal(find('cat/0.jpg')), { errno: 'EACCES' }, 'and so does an open')
})

t.test('a directory checked at an open is vouched for until a change names it, and a load then looks at it again', async t => {
  const { root, find, check, watch } = await watched(t)
  t.equal(await watch.refusal(find('cat/0.jpg')), undefined, 'an open checks cat and the source directory')
  const unchanged = watch.unchangedDirectories()
  t.ok(unchanged(find('cat')), 'cat is vouched for')
  t.notOk(unchanged(find('dog')), 'dog, never checked, is not')
  chmodSync(path.join(root, 'cat'), 0o700)
  t.notOk(watch.unchangedDirectories()(find('cat')), 'after a chmod, cat is not vouched for')
  const refusing = await check.directoriesRefusing([find('cat/0.jpg')], watch.unchangedDirectories())
  t.match(refusing(find('cat/0.jpg')), { errno: 'EACCES' }, 'and the load refuses its files')
})

/**
 * Two opens of cat/0.jpg around `change`: the first's check of cat has
 * looked at the source and waits while the change is made (and its event
 * read); the second comes after. What each was told.
 */
async function opensAround ({ find, check, watch }: Watched, change: () => void): Promise<{ first: Refusal | undefined, second: Refusal | undefined }> {
  await watch.refusal(find('dog/0.jpg'))
  let release = (): void => {}
  check.gate = new Promise(resolve => { release = resolve })
  const looked = check.looked
  const first = watch.refusal(find('cat/0.jpg'))
  while (check.looked === looked) await sleep(5)
  change()
  watch.drain()
  check.gate = Promise.resolve()
  const second = watch.refusal(find('cat/0.jpg'))
  release()
  return { first: await first, second: await second }
}

t.test('an open after a change does not take the answer of a check that looked before it', async t => {
  const source = await watched(t)
  const { first, second } = await opensAround(source, () => chmodSync(path.join(source.root, 'cat'), 0o700))
  t.equal(first, undefined, 'the open before the chmod is served')
  t.match(second, { errno: 'EACCES' }, 'the open after it is refused')
  t.notOk(source.watch.unchangedDirectories()(source.find('cat')), 'and cat is not vouched for')
})

t.test('an open after a change on a link\'s real path does not take the answer of a check that looked before it', async t => {
  const source = await watched(t, { linkedCat: true })
  const { first, second } = await opensAround(source, () => chmodSync(path.join(source.base, 'outside'), 0o700))
  t.equal(first, undefined, 'the open before the chmod is served')
  t.match(second, { errno: 'EACCES' }, 'the open after it is refused')
})

t.test('a sample with another hard link is watched itself: a chmod through the other name marks it, and nothing falls back to polling', async t => {
  const { base, find, watch } = await watched(t, { hardLink: true })
  t.equal(watch.stats().polledDirectories, 0, 'no directory polled')
  t.equal(await watch.refusal(find('cat/0.jpg')), undefined)
  chmodSync(path.join(base, 'elsewhere.jpg'), 0o600)
  watch.drain()
  t.notOk(watch.isClear(find('cat/0.jpg')), 'the sample is marked')
  t.match(await watch.refusal(find('cat/0.jpg')), { errno: 'EACCES' }, 'and refused')
})

t.test('a directory above the source moved away and made anew: the source\'s own check holds for a second from then on', async t => {
  const { base, find, watch } = await watched(t)
  t.equal(await watch.refusal(find('cat/0.jpg')), undefined)
  t.ok(watch.unchangedDirectories()(find('cat')), 'vouched for while the path is the one watched')
  renameSync(path.join(base, 'a'), path.join(base, 'moved'))
  mkdirSync(path.join(base, 'a', 'src'), { recursive: true })
  watch.drain()
  t.notOk(watch.unchangedDirectories()(find('cat')), 'after the move, nothing under the source is vouched for')
  t.equal(await watch.refusal(find('cat/0.jpg')), undefined, 'the new directories on the path let everyone through')
  t.notOk(watch.unchangedDirectories()(find('cat')), 'and even checked, not vouched for: the new directory has no watch')
  chmodSync(path.join(base, 'a'), 0o700)
  await sleep(1100)
  t.match(await watch.refusal(find('cat/0.jpg')), { errno: 'EACCES' }, 'a chmod of the new directory, which raises no event, is seen within a second')
})
