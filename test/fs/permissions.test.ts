// No privilege widening (docs/design.md, "Permissions"): through a mount
// with --allow-other, a real unprivileged user (nobody) reads exactly what
// they could read from the source: files' and directories' modes, the
// directories above the source, the real paths links lead through, and
// redirection itself (an open is never answered with a file the opener
// could not read). On both FUSE backends.
import { chmodSync, linkSync, mkdirSync, promises as fs, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { sha1 } from '../helpers/dataset'
import { emptyDir, forceUnmount, mount, redirfs } from '../helpers/mount'
import { asNobody, denyNobodyByAcl, openToEveryone, readAsNobody, readInTwoAsNobody } from '../helpers/unprivileged'

interface Tree { source: string, master: string, hidden: string, samples: string[], contents: Map<string, string> }

/**
 * A source with: world-readable samples, one sample only its owner may
 * read (in the same class), a 0700 directory, and a curated subset of
 * links: into the source, into a world-readable master copy outside it,
 * and into a directory outside it that nobody may enter.
 */
function makeTree (): Tree {
  const base = emptyDir('redirfs-perm-')
  const source = path.join(base, 'source')
  const master = path.join(base, 'master')
  const hidden = path.join(base, 'hidden')
  const contents = new Map<string, string>()
  const write = (file: string, text: string, mode = 0o644): void => {
    mkdirSync(path.dirname(file), { recursive: true, mode: 0o755 })
    writeFileSync(file, text)
    chmodSync(file, mode)
    contents.set(sha1(Buffer.from(text)), text)
  }
  for (let i = 0; i < 6; i++) write(path.join(source, 'public', 'cat', `${i}.jpg`), `public cat ${i}`)
  write(path.join(source, 'public', 'cat', 'mine.jpg'), 'only root may read this cat', 0o600)
  write(path.join(source, 'private', 'dog', '0.jpg'), 'a dog in a closed directory')
  write(path.join(master, 'owl', '0.jpg'), 'an owl of the master copy')
  write(path.join(hidden, 'owl', '1.jpg'), 'an owl nobody may reach')
  mkdirSync(path.join(source, 'subset', 'owl'), { recursive: true })
  symlinkSync(path.join(source, 'public', 'cat', '0.jpg'), path.join(source, 'subset', 'owl', 'inside.jpg'))
  symlinkSync(path.join(master, 'owl', '0.jpg'), path.join(source, 'subset', 'owl', 'master.jpg'))
  symlinkSync(path.join(hidden, 'owl', '1.jpg'), path.join(source, 'subset', 'owl', 'hidden.jpg'))
  openToEveryone(base, source, master, path.join(source, 'subset'), path.join(source, 'subset', 'owl'))
  return {
    source,
    master,
    hidden,
    samples: ['public/cat/0.jpg', 'public/cat/1.jpg', 'public/cat/2.jpg', 'public/cat/3.jpg', 'public/cat/4.jpg', 'public/cat/5.jpg', 'public/cat/mine.jpg',
      'private/dog/0.jpg', 'subset/owl/inside.jpg', 'subset/owl/master.jpg', 'subset/owl/hidden.jpg'],
    contents
  }
}

const made = makeTree()
// The closed directories, closed after writing: 0700 root.
chmodSync(path.join(made.source, 'private'), 0o700)
chmodSync(made.hidden, 0o700)
t.teardown(() => rmSync(path.dirname(made.source), { recursive: true, force: true }))

for (const backend of ['native', 'fuse-native']) {
  t.test(`${backend}: nobody reads through the mount exactly what they may read from the source`, async t => {
    const mountpoint = emptyDir()
    openToEveryone(mountpoint)
    await mount(t, made.source, mountpoint, '--allow-other', '--fuse-backend', backend, '--chunk-size', '2', '--memory', '10K')
    const direct = await readAsNobody(made.source, made.samples)
    const through = await readAsNobody(mountpoint, made.samples)
    for (const sample of made.samples) {
      t.equal(through[sample].startsWith('error'), direct[sample].startsWith('error'), `${sample}: ${direct[sample].startsWith('error') ? 'refused' : 'readable'}, as from the source`)
    }
    t.match(through['public/cat/mine.jpg'], /^error Permission denied/, 'a 0600 sample')
    t.match(through['private/dog/0.jpg'], /^error Permission denied/, 'a sample in a 0700 directory')
    t.match(through['subset/owl/hidden.jpg'], /^error Permission denied/, 'a link into a directory nobody may enter')
    t.notMatch(through['subset/owl/master.jpg'], /^error/, 'a link into a world-readable master copy works')
    // Every byte nobody got is a file nobody may read: redirection never hands over the 0600 sample.
    const readable = new Set(made.samples.filter(s => !direct[s].startsWith('error')).map(s => direct[s]))
    for (const [sample, got] of Object.entries(through)) {
      if (!got.startsWith('error')) t.ok(readable.has(got), `${sample}: answered with bytes nobody may read from the source too`)
    }
    const listing = await asNobody('/bin/ls', [path.join(mountpoint, 'private')])
    t.not(listing.code, 0)
    t.match(listing.stderr, /Permission denied/, 'a 0700 directory cannot be listed')
  })
}

t.test('the directories above the source keep nobody out of the mount, as they keep them out of the source', async t => {
  const closed = emptyDir('redirfs-closed-') // 0700, root's
  const source = path.join(closed, 'data')
  mkdirSync(path.join(source, 'cat'), { recursive: true, mode: 0o755 })
  for (let i = 0; i < 3; i++) writeFileSync(path.join(source, 'cat', `${i}.jpg`), `cat ${i}`)
  t.teardown(() => rmSync(closed, { recursive: true, force: true }))
  const mountpoint = emptyDir()
  openToEveryone(mountpoint)
  await mount(t, source, mountpoint, '--allow-other', '--chunk-size', '2')
  t.match((await readAsNobody(source, ['cat/0.jpg']))['cat/0.jpg'], /^error Permission denied/)
  t.match((await readAsNobody(mountpoint, ['cat/0.jpg']))['cat/0.jpg'], /^error Permission denied/)
  const stat = await fs.stat(mountpoint)
  t.equal(stat.mode & 0o077, 0, 'the root shows no access for group and others')
})

t.test('links into system directories are refused by name; --skip-unservable leaves them out', async t => {
  const source = emptyDir('redirfs-links-')
  mkdirSync(path.join(source, 'cat'))
  for (let i = 0; i < 3; i++) writeFileSync(path.join(source, 'cat', `${i}.jpg`), `cat ${i}`)
  symlinkSync('/etc/shadow', path.join(source, 'cat', 'shadow.jpg'))
  symlinkSync('/etc', path.join(source, 'etc'))
  symlinkSync('/', path.join(source, 'everything'))
  t.teardown(() => rmSync(source, { recursive: true, force: true }))
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  const refused = await redirfs('mount', source, mountpoint, '--chunk-size', '2')
  t.not(refused.code, 0)
  t.match(refused.stderr, /^redirfs: 3 entries of the source cannot be served: cat\/shadow\.jpg \(a symbolic link out of the source into \/etc, a system directory \(\/etc\/shadow\)\), etc \(a symbolic link out of the source into \/etc, a system directory \(\/etc\)\), everything \(a symbolic link back to a directory it is in, a loop\); fix or remove them, or pass --skip-unservable to leave them out\n$/)
  const skipping = await redirfs('mount', source, mountpoint, '--chunk-size', '2', '--skip-unservable')
  t.equal(skipping.code, 0, skipping.stderr)
  t.same((await fs.readdir(mountpoint)).sort(), ['cat'])
  t.same((await fs.readdir(path.join(mountpoint, 'cat'))).sort(), ['0.jpg', '1.jpg', '2.jpg'])
})

/** A class directory of `count` world-readable samples named `<cls>/<i>.jpg` under `root`. */
function writeClass (root: string, cls: string, count: number): string[] {
  mkdirSync(path.join(root, cls), { recursive: true, mode: 0o755 })
  return Array.from({ length: count }, (_, i) => {
    writeFileSync(path.join(root, cls, `${i}.jpg`), `${cls} ${i}`)
    chmodSync(path.join(root, cls, `${i}.jpg`), 0o644)
    return `${cls}/${i}.jpg`
  })
}

/** The contents nobody got, of every read that was not refused. */
const servedTo = (reads: Record<string, string>): string[] => Object.values(reads).filter(got => !got.startsWith('error'))

t.test('an ACL that denies a user what the mode allows keeps them out through the mount too', async t => {
  const source = emptyDir('redirfs-acl-')
  t.teardown(() => rmSync(source, { recursive: true, force: true }))
  const samples = writeClass(source, 'cat', 4)
  openToEveryone(source)
  denyNobodyByAcl(path.join(source, 'cat', '0.jpg'), 0o644)
  const mountpoint = emptyDir()
  openToEveryone(mountpoint)
  await mount(t, source, mountpoint, '--allow-other', '--chunk-size', '2', '--memory', '10K')
  t.match((await readAsNobody(source, ['cat/0.jpg']))['cat/0.jpg'], /^error Permission denied/, 'the source denies nobody')
  const through = await readAsNobody(mountpoint, samples)
  t.match(through['cat/0.jpg'], /^error Permission denied/, 'so does the mount')
  t.equal((await fs.stat(path.join(mountpoint, 'cat', '0.jpg'))).mode & 0o777, 0o600, 'shown with its owner\'s bits only')
  t.notOk(servedTo(through).includes(sha1(Buffer.from('cat 0'))), 'and no other open is answered with it')
  t.equal(servedTo(through).length, 3, 'the other three are read')
})

t.test('with --group-depth, a closed directory inside a group keeps its samples from those it keeps out', async t => {
  const source = emptyDir('redirfs-depth-')
  t.teardown(() => rmSync(source, { recursive: true, force: true }))
  const open = writeClass(path.join(source, 'cat'), 'open', 4).map(s => `cat/${s}`)
  writeClass(path.join(source, 'cat'), 'closed', 4)
  chmodSync(path.join(source, 'cat', 'closed'), 0o700)
  openToEveryone(source, path.join(source, 'cat'))
  const mountpoint = emptyDir()
  openToEveryone(mountpoint)
  await mount(t, source, mountpoint, '--allow-other', '--group-depth', '1', '--chunk-size', '2', '--memory', '10K')
  const through = await readAsNobody(mountpoint, open)
  const closed = new Set(Array.from({ length: 4 }, (_, i) => sha1(Buffer.from(`closed ${i}`))))
  t.equal(servedTo(through).length, 4, 'nobody reads all four open samples')
  t.notOk(servedTo(through).some(got => closed.has(got)), 'never answered with a sample of the closed directory')
})

t.test('a chmod in the source after the mount holds through the mount at once', async t => {
  const source = emptyDir('redirfs-chmod-')
  t.teardown(() => rmSync(source, { recursive: true, force: true }))
  const cats = writeClass(source, 'cat', 4)
  const dogs = writeClass(source, 'dog', 4)
  openToEveryone(source)
  const mountpoint = emptyDir()
  openToEveryone(mountpoint)
  await mount(t, source, mountpoint, '--allow-other', '--chunk-size', '2', '--memory', '10K')
  chmodSync(path.join(source, 'cat', '1.jpg'), 0o600)
  chmodSync(path.join(source, 'dog'), 0o700)
  const through = await readAsNobody(mountpoint, [...cats, ...dogs])
  t.notOk(servedTo(through).includes(sha1(Buffer.from('cat 1'))), 'the file made private is never served to nobody')
  t.equal(servedTo(through).filter(got => got !== sha1(Buffer.from('cat 1'))).length, 3, 'the other cats are')
  t.same(dogs.map(dog => through[dog]), dogs.map(() => 'error Input/output error'), 'nothing of a directory closed since the mount')
})

t.test('an ACL on the source directory itself that denies a user keeps them out of the whole mount', async t => {
  const base = emptyDir('redirfs-acl-root-')
  t.teardown(() => rmSync(base, { recursive: true, force: true }))
  const source = path.join(base, 'data')
  const samples = writeClass(source, 'cat', 2)
  openToEveryone(base, source)
  denyNobodyByAcl(source, 0o755)
  const mountpoint = emptyDir()
  openToEveryone(mountpoint)
  await mount(t, source, mountpoint, '--allow-other', '--chunk-size', '2')
  t.match((await readAsNobody(source, samples))[samples[0]], /^error Permission denied/, 'the source keeps nobody out')
  t.same(Object.values(await readAsNobody(mountpoint, samples)).map(got => got.replace(/ .*/, '')), ['error', 'error'], 'so does the mount')
  t.equal((await fs.stat(mountpoint)).mode & 0o077, 0, 'whose root shows its owner\'s bits only')
})

t.test('an ACL added after the mount to a directory above the source keeps the user it denies out of what was loaded and what was not', async t => {
  const base = emptyDir('redirfs-acl-above-')
  t.teardown(() => rmSync(base, { recursive: true, force: true }))
  const source = path.join(base, 'data')
  const cats = writeClass(source, 'cat', 4)
  const dogs = writeClass(source, 'dog', 4)
  openToEveryone(base, source)
  const mountpoint = emptyDir()
  openToEveryone(mountpoint)
  await mount(t, source, mountpoint, '--allow-other', '--chunk-size', '8', '--memory', '100K')
  const read = await readInTwoAsNobody(mountpoint, [...cats, ...dogs], async first => {
    t.notMatch(Object.values(first)[0], /^error/, 'the first is read')
    denyNobodyByAcl(base, 0o755)
  })
  t.match((await readAsNobody(source, [dogs[0]]))[dogs[0]], /^error Permission denied/, 'the source denies nobody now')
  t.same(servedTo(read).length, 1, 'so does the mount: neither the cats in memory nor the dogs not yet read')
})

t.test('a chmod through another hard link of a sample, outside the source, keeps nobody from its bytes in memory', async t => {
  const base = emptyDir('redirfs-hardlink-')
  t.teardown(() => rmSync(base, { recursive: true, force: true }))
  const source = path.join(base, 'data')
  const cats = writeClass(source, 'cat', 6)
  mkdirSync(path.join(base, 'elsewhere'))
  for (const [i, cat] of cats.entries()) linkSync(path.join(source, cat), path.join(base, 'elsewhere', `${i}.jpg`))
  openToEveryone(base, source)
  const mountpoint = emptyDir()
  openToEveryone(mountpoint)
  await mount(t, source, mountpoint, '--allow-other', '--chunk-size', '8', '--memory', '100K')
  const read = await readInTwoAsNobody(mountpoint, cats, async first => {
    t.notMatch(Object.values(first)[0], /^error/, 'the first is read')
    for (const i of cats.keys()) chmodSync(path.join(base, 'elsewhere', `${i}.jpg`), 0o600)
  })
  t.match((await readAsNobody(source, [cats[1]]))[cats[1]], /^error Permission denied/, 'the source denies nobody now')
  t.equal(servedTo(read).length, 1, 'so does the mount, though the rest were in memory')
})

t.test('bytes already in memory are not served after a chmod in the source makes them private (the same reader goes on)', async t => {
  const source = emptyDir('redirfs-chmod-memory-')
  t.teardown(() => rmSync(source, { recursive: true, force: true }))
  const cats = writeClass(source, 'cat', 6)
  openToEveryone(source)
  const mountpoint = emptyDir()
  openToEveryone(mountpoint)
  // A chunk holds the whole class: the first open loads it all into memory.
  await mount(t, source, mountpoint, '--allow-other', '--chunk-size', '8', '--memory', '100K')
  const read = await readInTwoAsNobody(mountpoint, cats, async first => {
    t.notMatch(Object.values(first)[0], /^error/, 'the first is read')
    for (const cat of cats) chmodSync(path.join(source, cat), 0o600)
  })
  t.same(cats.slice(1).map(cat => read[cat]), cats.slice(1).map(() => 'error Input/output error'), 'none of the rest, though all of them were in memory')
  t.equal(servedTo(read).length, 1)
})

t.test('a directory on a link\'s real path closed after the mount keeps nobody from the link, as from its target', async t => {
  const base = emptyDir('redirfs-link-closed-')
  t.teardown(() => rmSync(base, { recursive: true, force: true }))
  const source = path.join(base, 'source')
  const master = path.join(base, 'master')
  writeClass(master, 'owl', 2)
  writeClass(source, 'cat', 2)
  mkdirSync(path.join(source, 'owl'), { mode: 0o755 })
  for (const i of [0, 1]) symlinkSync(path.join(master, 'owl', `${i}.jpg`), path.join(source, 'owl', `${i}.jpg`))
  openToEveryone(base, source, master)
  const mountpoint = emptyDir()
  openToEveryone(mountpoint)
  await mount(t, source, mountpoint, '--allow-other', '--chunk-size', '2', '--memory', '100K')
  const owls = ['owl/0.jpg', 'owl/1.jpg']
  const read = await readInTwoAsNobody(mountpoint, owls, async first => {
    t.notMatch(first['owl/0.jpg'], /^error/, 'readable through the link while its real path is open')
    chmodSync(path.join(master, 'owl'), 0o700)
  })
  t.match((await readAsNobody(master, ['owl/1.jpg']))['owl/1.jpg'], /^error Permission denied/, 'the target is closed to nobody now')
  t.equal(read['owl/1.jpg'], 'error Input/output error', 'and so is the link')
})

t.test('an ACL added in the source after the mount keeps the user it denies out at once', async t => {
  const source = emptyDir('redirfs-acl-later-')
  t.teardown(() => rmSync(source, { recursive: true, force: true }))
  const cats = writeClass(source, 'cat', 4)
  openToEveryone(source)
  const mountpoint = emptyDir()
  openToEveryone(mountpoint)
  await mount(t, source, mountpoint, '--allow-other', '--chunk-size', '8', '--memory', '100K')
  const read = await readInTwoAsNobody(mountpoint, cats, async () => {
    for (const cat of cats.slice(1)) denyNobodyByAcl(path.join(source, cat), 0o644)
  })
  t.match((await readAsNobody(source, [cats[1]]))[cats[1]], /^error Permission denied/, 'the source denies nobody now')
  t.same(cats.slice(1).map(cat => read[cat]), cats.slice(1).map(() => 'error Input/output error'), 'so does the mount, though they were in memory')
})
