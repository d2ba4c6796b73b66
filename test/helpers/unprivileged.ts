// Running commands as a real unprivileged user (nobody), as a local user
// of a shared machine would: through setpriv, with no supplementary groups.
import { execFile, execFileSync, spawn } from 'node:child_process'
import { chmodSync, chownSync } from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import { CLI, CLI_ENV, emptyDir, RUNTIME_DIR } from './mount'

const run = promisify(execFile)
export const NOBODY = 65534
// tap's process tracking puts its hooks back into NODE_OPTIONS of every child it sees spawned; they
// would write into the checkout, which nobody may not: `env -u` takes them out after it.
export const AS_NOBODY = ['setpriv', `--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', '/usr/bin/env', '-u', 'NODE_OPTIONS']

export interface Outcome { code: number, stdout: string, stderr: string }

/**
 * The checkout as nobody sees it. A clone may sit under a directory closed
 * to other users (CI's may be under /root, which is 0700), where nobody
 * could not load the CLI; so a command of nobody's that runs the checkout's
 * code runs in a mount namespace of its own, in which the checkout is bound
 * onto this directory, which anyone may pass through. The binding ends with
 * the namespace: outside it the directory stays empty.
 */
export const CHECKOUT = path.resolve(__dirname, '../..')
export const CHECKOUT_VIEW = emptyDir('redirfs-checkout-')
chmodSync(CHECKOUT_VIEW, 0o755)

/** Where nobody finds a file of the checkout, in CHECKOUT_VIEW; a file elsewhere, where it is. */
export function inCheckoutView (file: string): string {
  const relative = path.relative(CHECKOUT, file)
  return relative.startsWith('..') ? file : path.join(CHECKOUT_VIEW, relative)
}

/** Runs the rest of a command line in a mount namespace where CHECKOUT_VIEW shows the checkout. */
const WITH_CHECKOUT_VIEW = ['unshare', '--mount', '--propagation', 'private', '/bin/sh', '-c', 'mount --bind "$0" "$1" && shift && exec "$@"', CHECKOUT, CHECKOUT_VIEW]

/** Nobody's own runtime directory for this test process (root's is not theirs to use), removed at exit. */
const NOBODY_RUNTIME_DIR = emptyDir('redirfs-run-nobody-')
chownSync(NOBODY_RUNTIME_DIR, NOBODY, NOBODY)

/** `command` as nobody; `checkout`: in CHECKOUT_VIEW's namespace, for a command that runs the checkout's code. */
export async function asNobody (command: string, args: string[], given: NodeJS.ProcessEnv = CLI_ENV, checkout = false): Promise<Outcome> {
  const env = given.REDIRFS_RUNTIME_DIR === RUNTIME_DIR ? { ...given, REDIRFS_RUNTIME_DIR: NOBODY_RUNTIME_DIR } : given
  const [first, ...rest] = [...(checkout ? WITH_CHECKOUT_VIEW : []), ...AS_NOBODY, command, ...args]
  try {
    const { stdout, stderr } = await run(first, rest, { timeout: 120_000, env, maxBuffer: 16 * 2 ** 20 })
    return { code: 0, stdout, stderr }
  } catch (err) {
    const e = err as { code?: number, stdout?: string, stderr?: string }
    return { code: typeof e.code === 'number' ? e.code : -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' }
  }
}

const READ_IN_TWO = `
import hashlib, json, os, sys
root, paths = sys.argv[1], sys.argv[2:]
def read(p):
    try:
        with open(os.path.join(root, p), 'rb') as f:
            return hashlib.sha1(f.read()).hexdigest()
    except OSError as e:
        return 'error ' + (os.strerror(e.errno) if e.errno else str(e))
first = {paths[0]: read(paths[0])}
print(json.dumps(first), flush=True)
sys.stdin.readline()
print(json.dumps({p: read(p) for p in paths[1:]}), flush=True)
`

/**
 * One process of nobody's that reads the first of `paths` under `root`,
 * then, when told, the rest (as readAsNobody reports them): so a test can
 * change the source between the two, while the same reader goes on.
 */
export async function readInTwoAsNobody (root: string, paths: readonly string[], between: (first: Record<string, string>) => Promise<void>): Promise<Record<string, string>> {
  const reader = spawn(AS_NOBODY[0], [...AS_NOBODY.slice(1), '/usr/bin/python3', '-c', READ_IN_TWO, root, ...paths], { stdio: ['pipe', 'pipe', 'inherit'] })
  try {
    const lines: string[] = []
    let waiting: (() => void) | undefined
    let pending = ''
    reader.stdout.on('data', (chunk: Buffer) => {
      pending += chunk.toString()
      const parts = pending.split('\n')
      pending = parts.pop()!
      lines.push(...parts)
      waiting?.()
    })
    const line = async (n: number): Promise<Record<string, string>> => {
      while (lines.length <= n) {
        if (reader.exitCode !== null) throw new Error('the reader exited early')
        await new Promise<void>(resolve => { waiting = resolve; setTimeout(resolve, 100) })
      }
      return JSON.parse(lines[n]) as Record<string, string>
    }
    const first = await line(0)
    await between(first)
    reader.stdin.write('\n')
    return { ...first, ...await line(1) }
  } finally {
    reader.kill('SIGKILL')
  }
}

/** The redirfs CLI as nobody, from CHECKOUT_VIEW. */
export async function redirfsAsNobody (...args: string[]): Promise<Outcome> {
  return await cliAsNobody(args)
}

/** The redirfs CLI as nobody with an environment of the caller's, from CHECKOUT_VIEW. */
export async function cliAsNobody (args: string[], env: NodeJS.ProcessEnv = CLI_ENV): Promise<Outcome> {
  return await asNobody(process.execPath, [inCheckoutView(CLI), ...args], env, true)
}

const READER = `
import hashlib, json, os, sys
root, paths = sys.argv[1], sys.argv[2:]
out = {}
for p in paths:
    try:
        with open(os.path.join(root, p), 'rb') as f:
            out[p] = hashlib.sha1(f.read()).hexdigest()
    except OSError as e:
        out[p] = 'error ' + (os.strerror(e.errno) if e.errno else str(e))
print(json.dumps(out))
`

/** What nobody gets reading each path under `root`: the sha1 of the bytes, or 'error <reason>'. */
export async function readAsNobody (root: string, paths: readonly string[]): Promise<Record<string, string>> {
  const result = await asNobody('/usr/bin/python3', ['-c', READER, root, ...paths])
  if (result.code !== 0) throw new Error(`reader failed: ${result.stderr}`)
  return JSON.parse(result.stdout) as Record<string, string>
}

/** Lets nobody through the directories a test made (mkdtemp makes them 0700), up to and including `dir`. */
export function openToEveryone (...dirs: string[]): void {
  for (const dir of dirs) chmodSync(path.resolve(dir), 0o755)
}

/** Gives `file` (mode `mode`) an access ACL that denies nobody everything: user:nobody:---, the other entries as the mode says. */
export function denyNobodyByAcl (file: string, mode: number): void {
  const [owner, group, other] = [(mode >> 6) & 7, (mode >> 3) & 7, mode & 7]
  const entries = `[(1, ${owner}, 0xffffffff), (2, 0, ${NOBODY}), (4, ${group}, 0xffffffff), (16, ${group}, 0xffffffff), (32, ${other}, 0xffffffff)]`
  execFileSync('/usr/bin/python3', ['-c', `import os, struct, sys; os.setxattr(sys.argv[1], "system.posix_acl_access", struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in ${entries}))`, file])
}
