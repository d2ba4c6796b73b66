// A FUSE mount that calls itself redirfs (source `redirfs`, a `.redirfs/`
// with `stats` and `reset`) without being one, made by a user of the
// test's choice, and the redirfs CLI run against it as root.
//
// Unprivileged users may make FUSE mounts (fusermount3 is setuid), but
// this machine keeps /dev/fuse to root and /etc/fuse.conf without
// user_allow_other: so all of it runs in a mount namespace of its own in
// which /dev/fuse is 0666 and user_allow_other is set, as on a stock
// system; and the checkout is bound where nobody can load fuse-native from
// it (unprivileged.ts, CHECKOUT_VIEW). The fake, its mount and those
// changes end with the namespace.
import { execFile } from 'node:child_process'
import { chownSync } from 'node:fs'
import { promisify } from 'node:util'
import { CLI, CLI_ENV, emptyDir, type CliResult } from './mount'
import { CHECKOUT, CHECKOUT_VIEW, inCheckoutView, NOBODY } from './unprivileged'

const run = promisify(execFile)

/** The fake, with fuse-native: `answer` is what its control files hold, or 'hang' for opens it never answers. */
const FAKE = `
const Fuse = require(${JSON.stringify(inCheckoutView(require.resolve('fuse-native')))})
const [mountpoint, answer] = process.argv.slice(1)
const now = new Date()
const dir = { mtime: now, atime: now, ctime: now, nlink: 1, size: 4096, mode: 0o40755, uid: process.getuid(), gid: process.getgid() }
const bytes = Buffer.from(answer)
const file = { ...dir, nlink: 1, mode: 0o100444, size: bytes.length }
const fuse = new Fuse(mountpoint, {
  readdir: (p, cb) => cb(0, p === '/' ? ['.redirfs'] : ['stats', 'reset']),
  getattr: (p, cb) => p === '/' || p === '/.redirfs' ? cb(0, dir) : /^\\/\\.redirfs\\/(stats|reset)$/.test(p) ? cb(0, file) : cb(Fuse.ENOENT),
  open: (p, flags, cb) => { if (answer !== 'hang') cb(0, 1) },
  read: (p, fd, buf, len, pos, cb) => { const part = bytes.subarray(pos, pos + len); part.copy(buf); cb(part.length) },
  release: (p, fd, cb) => cb(0)
}, { fsname: 'redirfs', allowOther: true, timeout: false })
fuse.mount(err => { if (err) { console.error(err.message); process.exit(1) } })
`

const SCRIPT = `
set -u
mountpoint=$1 owner=$2 answer=$3; shift 3
private=$(mktemp -d)
mount -t tmpfs -o mode=0755 tmpfs "$private"
mknod -m 0666 "$private/fuse" c 10 229 && mount --bind "$private/fuse" /dev/fuse
echo user_allow_other > "$private/fuse.conf" && mount --bind "$private/fuse.conf" /etc/fuse.conf
mount --bind "$CHECKOUT" "$CHECKOUT_VIEW"
setpriv --pdeathsig=SIGKILL --reuid="$owner" --regid="$owner" --clear-groups /usr/bin/env -u NODE_OPTIONS "$NODE" -e "$FAKE" "$mountpoint" "$answer" &
fake=$!
for _ in $(seq 200); do grep -q " $mountpoint " /proc/self/mountinfo && break; sleep 0.05; done
grep " $mountpoint " /proc/self/mountinfo | sed 's/^/mount: /'
# Each command's exit status and output, one after the other; each bounded, so that a hang ends.
for command in "$@"; do
  out=$(timeout 60 "$NODE" "$CLI" $command "$mountpoint" 2>&1)
  printf '%s\\n%s\\n%s\\n' "== $command: $?" "$out" "=="
done
kill "$fake" 2>/dev/null; wait "$fake" 2>/dev/null
exit 0
`

export interface FakeRun {
  /** The fake's line of the mount table. */
  readonly mountLine: string
  /** Each command's outcome (stdout and stderr together, in stderr). */
  readonly results: CliResult[]
}

/**
 * Makes the fake as `owner` (a uid) and runs `redirfs <command> <mountpoint>`
 * as root for each command; returns what each printed and how it exited.
 */
export async function againstFakeMount (owner: number | 'nobody', answer: string, commands: string[]): Promise<FakeRun> {
  const uid = owner === 'nobody' ? NOBODY : owner
  const mountpoint = emptyDir('redirfs-fake-')
  chownSync(mountpoint, uid, uid)
  const { stdout } = await run('unshare', ['--mount', '--propagation', 'private', 'bash', '-c', SCRIPT, 'fake', mountpoint, String(uid), answer, ...commands], {
    env: { ...CLI_ENV, NODE: process.execPath, CLI, FAKE, CHECKOUT, CHECKOUT_VIEW },
    timeout: 150_000,
    killSignal: 'SIGKILL'
  })
  const mountLine = /^mount: (.*)$/m.exec(stdout)?.[1] ?? ''
  const results = [...stdout.matchAll(/^== (.*): (\d+)\n([\s\S]*?)\n==$/gm)].map(m => ({ code: Number(m[2]), stdout: '', stderr: m[3] === '' ? '' : m[3] + '\n' }))
  return { mountLine, results }
}
