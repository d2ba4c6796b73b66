// The access rule for entries reached through links and for the mount's
// root, without a mount: which classes of users a directory on the way
// may stop, and which links are refused.
import t from 'tap'
import { directoriesDownTo, linkRefusal, reachableMode } from '../../src/chunks/access'

const dir = (uid: number, gid: number, mode: number): { uid: number, gid: number, mode: number } => ({ uid, gid, mode })

t.test('open directories keep the mode as it is', async t => {
  t.equal(reachableMode(0o100644, 1000, 1000, [dir(0, 0, 0o755), dir(0, 0, 0o755)]).toString(8), '100644')
})

t.test('a 0700 directory of root stops everyone but root', async t => {
  t.equal(reachableMode(0o100644, 1000, 100, [dir(0, 0, 0o755), dir(0, 0, 0o700)]).toString(8), '100000')
  t.equal(reachableMode(0o100644, 0, 0, [dir(0, 0, 0o700)]).toString(8), '100600', 'root-owned files keep the owner\'s bits (root passes)')
})

t.test('a home directory 0750 of its owner stops others, not the owner, and not its group', async t => {
  t.equal(reachableMode(0o100644, 1000, 1000, [dir(0, 0, 0o755), dir(1000, 1000, 0o750)]).toString(8), '100640')
})

t.test('a directory that lets only its own group through stops every class that may not be in it', async t => {
  t.equal(reachableMode(0o100664, 1000, 100, [dir(0, 42, 0o750)]).toString(8), '100000')
  t.equal(reachableMode(0o100664, 1000, 42, [dir(0, 42, 0o750)]).toString(8), '100060', 'the file\'s own group is that group')
})

t.test('a directory that lets others through but not its owner stops the file\'s others (who may be its owner)', async t => {
  t.equal(reachableMode(0o100644, 1000, 1000, [dir(2000, 2000, 0o055)]).toString(8), '100600')
})

t.test('links inside the source, or into a dataset elsewhere, are followed; into system directories they are not', async t => {
  t.equal(linkRefusal('/data/train/cat/1.jpg', '/data/train'), undefined)
  t.equal(linkRefusal('/data/master/cat/1.jpg', '/data/subset'), undefined)
  t.equal(linkRefusal('/etc/shadow', '/data/subset'), 'a symbolic link out of the source into /etc, a system directory')
  t.equal(linkRefusal('/root/secret.jpg', '/data/subset'), 'a symbolic link out of the source into /root, a system directory')
  t.equal(linkRefusal('/root/master/1.jpg', '/root/subset'), undefined, 'a dataset kept in /root links within /root')
  t.equal(linkRefusal('/var/lib/x', '/var/data'), 'a symbolic link out of the source into /var/lib, a system directory')
  t.equal(linkRefusal('/var/data2/x.jpg', '/var/data'), undefined)
})

t.test('the directories down to a path', async t => {
  t.same(directoriesDownTo('/data/master/cat'), ['/', '/data', '/data/master', '/data/master/cat'])
  t.same(directoriesDownTo('/'), ['/'])
})
