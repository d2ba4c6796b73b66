/**
 * Runs a fuzz target: cases drawn from consecutive seeds, bounded by a count
 * and a time (docs/development.md, "Fuzzing"). Case i of a run from seed S
 * draws everything from seed S + i, so a failure names the one command that
 * runs it again, alone. scripts/fuzz.sh passes the bounds in FUZZ_SEED,
 * FUZZ_RUNS and FUZZ_TIME; without them a target runs its CI budget.
 */
import { type Test } from 'tap'
import { printable, UsageError } from '../src/errors'
import { Draw } from './draw'

/**
 * A target's CI budget: the cases from seeds S to S + runs - 1, the same
 * every run (what CI runs is a fixed set), unless a machine too slow for
 * them reaches the time cap first (then the run says where it stopped).
 */
export interface Budget {
  /** Cases at most. */
  readonly runs: number
  /** Seconds at most (a case under way is finished). */
  readonly seconds: number
}

/** The longest line a refusal may be: a few paths or names cut short, and reasons; a line a terminal wraps a few times, never kilobytes. */
export const MAX_LINE = 1000

/** A seed, a count or a time from the environment; undefined when not given. */
function fromEnvironment (name: string): number | undefined {
  const text = process.env[name]
  if (text === undefined || text === '') return undefined
  const value = Number(text)
  if (!Number.isSafeInteger(value) || value < 0) throw new Error(`${name} must be a whole number, got '${text}'`)
  return value
}

/**
 * Runs `one` on fresh draws until the budget is spent; each failure (a throw,
 * or a case that does not finish within `caseMs`) fails the test with the
 * case's seed and the command that reproduces it. Stops after a few failures.
 */
export async function fuzz (t: Test, target: string, budget: Budget, one: (draw: Draw) => Promise<void> | void, caseMs = 60_000): Promise<void> {
  const seed = fromEnvironment('FUZZ_SEED') ?? 1
  const givenRuns = fromEnvironment('FUZZ_RUNS')
  const givenTime = fromEnvironment('FUZZ_TIME')
  const runs = givenRuns ?? (givenTime !== undefined ? Infinity : budget.runs)
  const seconds = givenTime ?? (givenRuns !== undefined ? Infinity : budget.seconds)
  const started = Date.now()
  let current: number | undefined
  // A case that never yields (a loop in synchronous code) is ended by tap's timeout: say which it was.
  const onTerm = (): void => { if (current !== undefined) process.stderr.write(`fuzz ${target}: case ${current} was running; reproduce: npm run fuzz -- ${target} --seed ${current} --runs 1\n`) }
  process.once('SIGTERM', onTerm)
  t.teardown(() => { process.off('SIGTERM', onTerm) })
  let cases = 0
  const failures: number[] = []
  /** The slowest cases, [ms, seed]: where a budget goes. */
  const slowest: Array<[number, number]> = []
  for (let i = 0; i < runs && Date.now() - started < seconds * 1000 && failures.length < 5; i++) {
    current = (seed + i) % 2 ** 32
    const began = Date.now()
    let timer: NodeJS.Timeout | undefined
    try {
      await Promise.race([
        Promise.resolve().then(() => one(new Draw(current!))),
        new Promise((_resolve, reject) => { timer = setTimeout(() => reject(new Error(`did not finish within ${caseMs / 1000} s (a hang)`)), caseMs) })
      ])
    } catch (err) {
      failures.push(current)
      t.fail(`${target}: case ${current} failed: ${(err as Error)?.stack ?? String(err)}\nreproduce: npm run fuzz -- ${target} --seed ${current} --runs 1`)
    } finally {
      clearTimeout(timer)
    }
    slowest.push([Date.now() - began, current])
    slowest.sort((a, b) => b[0] - a[0]).splice(3)
    cases++
  }
  current = undefined
  const took = ((Date.now() - started) / 1000).toFixed(1)
  t.comment(`${target}: slowest cases ${slowest.map(([ms, s]) => `${s} (${ms} ms)`).join(', ')}`)
  if (Number.isFinite(runs) && cases < runs && failures.length < 5) t.comment(`${target}: stopped by the time cap (${seconds} s) after ${cases} of ${runs} cases`)
  if (failures.length === 0) t.pass(`${target}: ${cases} cases from seed ${seed} in ${took} s, none failed`)
  else t.comment(`${target}: ${failures.length} of ${cases} cases from seed ${seed} failed: ${failures.join(', ')}`)
}

/**
 * Why `err` is not a refusal the user can read, or undefined: a UsageError
 * (never another type) of one line, short, that is not a bug's report.
 */
export function notOneLine (err: unknown): string | undefined {
  if (!(err instanceof UsageError)) return `not a UsageError but ${(err as Error)?.name ?? typeof err}: ${(err as Error)?.stack ?? String(err)}`
  return lineProblem(err.message)
}

/**
 * Why `text` is not one short line for a user, or undefined: no line break
 * (a name from outside is put in a message clipped, its control characters
 * written out), at most MAX_LINE characters as the CLI prints it, and not
 * a bug's report.
 */
export function lineProblem (text: string): string | undefined {
  const shown = printable(text)
  if (/[\n\r]/.test(text)) return `more than one line: ${JSON.stringify(text.slice(0, 1000))}`
  if (shown.length > MAX_LINE) return `${shown.length} characters long: ${JSON.stringify(shown.slice(0, 300))}...`
  if (/unexpected error/i.test(text)) return `a bug's report: ${JSON.stringify(text)}`
  return undefined
}

/** Throws when `err` is not one line for the user (inside a case, so the case fails with it). */
export function expectOneLine (err: unknown, what: string): void {
  const problem = notOneLine(err)
  if (problem !== undefined) throw new Error(`${what}: ${problem}`)
}
