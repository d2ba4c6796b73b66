// The source watch on a real directory and real inotify: which directories
// it vouches for, so that a load need not stat them again, and which a
// load must look at (src/chunks/source-watch.ts, source-check.ts).
import { chmodSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pino from 'pino'
import t, { type Test } from 'tap'
import { scanTree } from '../../src/chunks/scan'
import { SourceCheck } from '../../src/chunks/source-check'
import { SourceWatch } from '../../src/chunks/source-watch'

/** A source of two classes, scanned, then watched; `between` runs between the two. */
async function watched (t: Test, between: (root: string) => void = () => {}): Promise<{ root: string, find: (relative: string) => number, check: SourceCheck, watch: SourceWatch }> {
  const root = mkdtempSync(path.join(os.tmpdir(), 'redirfs-watch-'))
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  for (const c of ['cat', 'dog']) {
    mkdirSync(path.join(root, c))
    for (let i = 0; i < 2; i++) writeFileSync(path.join(root, c, `${i}.jpg`), Buffer.alloc(10, i))
  }
  const tree = await scanTree(root)
  between(root)
  const check = new SourceCheck(root, tree, realpathSync(root), false)
  const watch = await SourceWatch.start(tree, check, realpathSync(root), pino({ level: 'silent' }))
  t.teardown(() => watch.close())
  return { root, find: relative => tree.find(relative), check, watch }
}

t.test('a load looks again at every directory until an open has checked it since the watch began: a change before the watch raised no event', async t => {
  // Closed after the scan, before the watch began: nothing says so but a look.
  const { find, check, watch } = await watched(t, root => chmodSync(path.join(root, 'cat'), 0o700))
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
