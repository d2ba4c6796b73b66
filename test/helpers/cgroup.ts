// A memory cgroup of the test's own (v1, or v2 where that is what the
// machine mounts), to run a command under a real memory limit, as a
// container or a Slurm job would; removed in teardown, its processes killed.
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs'
import path from 'node:path'

export interface MemoryCgroup {
  readonly dir: string
  /** The limit file's name (memory.limit_in_bytes or memory.max). */
  setLimit (bytes: number): void
  usage (): number
  /** `sh -c` words that join the group, then exec the command. */
  wrap (command: string[]): string[]
}

const V1 = '/sys/fs/cgroup/memory'
const V2 = '/sys/fs/cgroup'

interface Teardown { teardown: (fn: () => Promise<void> | void) => void }

export function memoryCgroup (t: Teardown, name: string): MemoryCgroup {
  const v1 = existsSync(path.join(V1, 'memory.limit_in_bytes'))
  if (!v1 && !readFileSync(path.join(V2, 'cgroup.controllers'), 'utf8').includes('memory')) throw new Error('no memory cgroup controller on this machine')
  const dir = path.join(v1 ? V1 : V2, name)
  if (!v1) writeFileSync(path.join(V2, 'cgroup.subtree_control'), '+memory')
  mkdirSync(dir)
  t.teardown(async () => {
    for (let tries = 0; tries < 100; tries++) {
      const pids = readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)
      for (const pid of pids) { try { process.kill(Number(pid), 'SIGKILL') } catch {} }
      try { rmdirSync(dir); return } catch { await new Promise(resolve => setTimeout(resolve, 50)) }
    }
  })
  return {
    dir,
    setLimit: bytes => writeFileSync(path.join(dir, v1 ? 'memory.limit_in_bytes' : 'memory.max'), String(bytes)),
    usage: () => Number(readFileSync(path.join(dir, v1 ? 'memory.usage_in_bytes' : 'memory.current'), 'utf8')),
    wrap: command => ['sh', '-c', `echo $$ > ${dir}/cgroup.procs; exec "$@"`, 'cgroup', ...command]
  }
}
