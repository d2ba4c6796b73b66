/**
 * Runs Python against the bench's own code: bench/run.py imported as
 * `bench` and bench/harness.py as `harness`, `data` a fresh data directory
 * (removed in teardown). The body prints JSON as its last line of output;
 * stderr is the bench's log.
 */
import type { Test } from 'tap'
import { execFile } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'

const run = promisify(execFile)
const BENCH = path.join(__dirname, '..', '..', 'bench')

export async function benchPython (t: Test, body: string): Promise<{ result: any, log: string }> {
  const data = mkdtempSync(path.join(os.tmpdir(), 'redirfs-bench-data-'))
  t.teardown(() => { rmSync(data, { recursive: true, force: true }) })
  const script = ['import json, os, sys', `sys.path.insert(0, ${JSON.stringify(BENCH)})`, 'import run as bench', 'import harness', 'data = sys.argv[1]', body].join('\n')
  const { stdout, stderr } = await run('/usr/bin/python3', ['-c', script, data], { maxBuffer: 2 ** 24 })
  return { result: JSON.parse(stdout.trim().split('\n').at(-1)!), log: stderr }
}
