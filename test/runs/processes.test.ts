// What /proc tells the run tracker of real processes (src/runs/processes.ts):
// a process forked and never exec'd is a forked copy, one that calls
// setsid() leads its session.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import t from 'tap'
import { procTable } from '../../src/runs/processes'

// Forks a child that may call setsid() and then says its pid; both wait to be killed.
const FORKER = `
import os, sys, time
if os.fork() == 0:
    if sys.argv[1] == 'setsid':
        os.setsid()
    print(os.getpid(), flush=True)
    time.sleep(120)
    os._exit(0)
time.sleep(120)
`

for (const setsid of [false, true]) {
  t.test(`a python3 started by the test was exec'd; its fork is a forked copy${setsid ? ' that leads the session it made' : ', led by its parent'}`, async t => {
    const parent = spawn('/usr/bin/python3', ['-c', FORKER, setsid ? 'setsid' : '-'], { stdio: ['ignore', 'pipe', 'inherit'], detached: true })
    let child = 0
    t.teardown(() => {
      for (const pid of [-parent.pid!, child]) { try { if (pid !== 0) process.kill(pid, 'SIGKILL') } catch {} }
    })
    const [line] = await once(parent.stdout!, 'data') as [Buffer]
    child = Number(line.toString().trim())
    const parentInfo = procTable.info(parent.pid!)
    const childInfo = procTable.info(child)
    t.same([parentInfo?.forkedCopy, parentInfo?.leader, parentInfo?.programKnown], [false, true, true], 'the parent: exec\'d, started in a session of its own (detached), its executable read')
    t.same([childInfo?.forkedCopy, childInfo?.leader, childInfo?.parent], [true, setsid, parent.pid], `the child: forked, never exec'd; ${setsid ? 'a leader' : 'no leader'}`)
  })
}
