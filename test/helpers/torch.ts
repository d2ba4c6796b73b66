/**
 * Running test/fidelity/torch_reader.py (real PyTorch from Debian) against
 * a mount: generating its datasets, reading them as a trainer does, and
 * checking what each epoch received.
 */
import type { Test } from 'tap'
import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { mkdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'

const run = promisify(execFile)
const PYTHON = '/usr/bin/python3'
const READER = path.resolve(__dirname, '../fidelity/torch_reader.py')

export interface ReaderEpoch { received: string[], wrongLabels: number }
export interface ReaderReport { samples: number, epochs: ReaderEpoch[] }

/** Runs a reader command (`read`, `splits`) and returns the JSON it printed last. */
export async function runReader<T = ReaderReport> (command: string, mountpoint: string, table: string, ...args: string[]): Promise<T> {
  return await runReaderWith<T>({}, command, mountpoint, table, ...args)
}

/** `runReader` with more environment (a launcher's, as torchrun sets it). */
export async function runReaderWith<T = ReaderReport> (env: NodeJS.ProcessEnv, command: string, mountpoint: string, table: string, ...args: string[]): Promise<T> {
  const { stdout } = await run(PYTHON, [READER, command, mountpoint, table, ...args], { timeout: 300_000, maxBuffer: 64 * 2 ** 20, env: { ...process.env, ...env } })
  return JSON.parse(stdout.trim().split('\n').pop()!) as T
}

/** The reader as a job of its own (its own process group, as a shell starts one), to be stopped from outside. */
export function startReader (command: string, mountpoint: string, table: string, ...args: string[]): ChildProcess {
  return spawn(PYTHON, [READER, command, mountpoint, table, ...args], { detached: true, stdio: 'ignore' })
}

export { PYTHON, READER }

export interface TorchDataset {
  root: string
  /** identity → class directory, as JSON, for the reader. */
  table: string
  /** Every sample identity whose class directory starts with `prefix`, sorted. */
  identities: (prefix?: string) => string[]
}

/** Generates a dataset of the given shape in a new directory under `dir`. */
export async function generateTorchDataset (dir: string, shape = 'flat'): Promise<TorchDataset> {
  mkdirSync(dir)
  const root = path.join(dir, 'data')
  await run(PYTHON, [READER, 'generate', root, '--shape', shape])
  const table = path.join(dir, 'table.json')
  const classes = JSON.parse(readFileSync(table, 'utf8')) as Record<string, string>
  return { root, table, identities: (prefix = '') => Object.keys(classes).filter(id => classes[id].startsWith(prefix)).sort() }
}

/** Every epoch: no wrong label, every sample exactly once. */
export function checkEpochs (t: Test, epochs: ReaderEpoch[], identities: string[]): void {
  epochs.forEach((epoch, e) => {
    t.equal(epoch.wrongLabels, 0, `epoch ${e}: no wrong label`)
    t.same([...epoch.received].sort(), identities, `epoch ${e}: every sample exactly once`)
  })
}
