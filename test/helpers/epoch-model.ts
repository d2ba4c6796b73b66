// The reference model the model tests check a mount's answers against
// (docs/design.md, "Invariants"): small enough to be obviously right, and
// the same for the protocol driven directly and for a real mount. Files are
// named by their path relative to the root.
//
// - Each answer, as it arrives: a file of the opened file's group (right
//   label), the opened file itself for an exact open (a loader that stats
//   the path first), and one its opener may read now.
// - Each pass a job made over its samples (one epoch of one job: every path
//   once, in any order), when its run was the only one reading: every file
//   once, except what the docs say may differ. A file that cannot be served
//   (changed in the source, made unreadable, in a chunk whose read failed)
//   costs exactly one open that epoch, which fails; an exact open of a file
//   the same epoch already served to another path serves it again, counted
//   by the mount (`exactRepeats`), and one file then goes unserved (even
//   when that repeat's own read fails: it is one of the pass's opens).

export interface Answer {
  readonly opened: string
  /** The file whose bytes the open got; undefined when the open failed (EIO). */
  readonly served?: string
  readonly exact: boolean
}

/** Why an answer is wrong, or undefined. `mayRead`: whether the opener may read a file now. */
export function answerViolation (answer: Answer, groupOf: (file: string) => string, mayRead: (file: string) => boolean): string | undefined {
  const { opened, served, exact } = answer
  if (served === undefined) return undefined
  if (groupOf(served) !== groupOf(opened)) return `an open of ${opened} (group ${groupOf(opened)}) got ${served} (group ${groupOf(served)}): a wrong label`
  if (exact && served !== opened) return `an exact open of ${opened} got ${served}: its size was not the one the opener saw`
  if (!mayRead(served)) return `an open of ${opened} got ${served}, which its opener may not read`
  return undefined
}

export interface Pass {
  /** The paths the pass opened, each once. */
  readonly samples: readonly string[]
  readonly answers: readonly Answer[]
  /** Files that could not be served at some point of the pass (changed, made unreadable, in a chunk whose read failed). */
  readonly failing: ReadonlySet<string>
  /** What the mount counted as exact repeats during the pass. */
  readonly exactRepeats: number
}

/** Why a whole pass of a job that read alone is wrong; empty when it is what the model allows. */
export function passViolations ({ samples, answers, failing, exactRepeats }: Pass): string[] {
  const violations: string[] = []
  if (answers.length !== samples.length) violations.push(`${samples.length} paths opened, ${answers.length} answered`)
  const times = new Map<string, number>()
  for (const { served } of answers) if (served !== undefined) times.set(served, (times.get(served) ?? 0) + 1)
  const outside = [...times.keys()].filter(file => !samples.includes(file))
  if (outside.length > 0) violations.push(`served files the pass never opened a path of: ${outside.join(', ')}`)
  const twice = [...times].filter(([, n]) => n > 1).map(([file, n]) => `${file} ${n}x`)
  const extra = [...times.values()].reduce((sum, n) => sum + n - 1, 0)
  if (extra > exactRepeats) violations.push(`served more than once: ${twice.join(', ')} (${exactRepeats} exact repeats counted)`)
  const failed = answers.filter(answer => answer.served === undefined).length
  const missing = samples.filter(file => !times.has(file))
  if (missing.length !== failed + extra) violations.push(`never served: ${missing.join(', ') || 'none'}, but ${failed} opens failed and ${extra} files were served again`)
  const missingReadable = missing.filter(file => !failing.has(file))
  if (missingReadable.length > exactRepeats) violations.push(`never served though they could be: ${missingReadable.join(', ')}`)
  return violations
}
