// Fuzzes what `redirfs stats` does with what it reads back from a mount's
// control file (src/cli/mount-control.ts, src/cli/stats-command.ts): a
// daemon of another version, or any bytes at all. The stats of a real
// mount (a single node with its runs, and a cluster node) are mutated:
// fields removed, given values of other types, lists made objects, text
// with line breaks and control characters, numbers that are not numbers;
// then the JSON's text itself cut, spliced and garbled, or replaced by
// random bytes. The property: the text is parsed and printed as the stats
// table, one line per row and no control character in it, or refused with
// one line (a UsageError); never a TypeError's "unexpected error".
import t from 'tap'
import { parseStats, formatStats } from '../src/cli/stats-command'
import { printable } from '../src/errors'
import { clusterStats, singleStats } from '../test/helpers/stats'
import { AWKWARD_NUMBERS, AWKWARD_STRINGS, type Draw } from './draw'
import { expectOneLine, fuzz, lineProblem } from './run'

/** A JSON value of any type, some of them awkward. */
function anyValue (draw: Draw, depth = 0): unknown {
  switch (draw.below(depth > 2 ? 5 : 8)) {
    case 0: return draw.pick(AWKWARD_NUMBERS)
    case 1: return draw.pick(AWKWARD_STRINGS)
    case 2: return draw.pick([null, true, false])
    case 3: return draw.int(-5, 100000)
    case 4: return draw.text(draw.int(0, 20), 'any')
    case 5: return Array.from({ length: draw.int(0, 4) }, () => anyValue(draw, depth + 1))
    default: return Object.fromEntries(Array.from({ length: draw.int(0, 4) }, () => [draw.pick(['opens', 'key', 'trainer', 'node', 'x', '']), anyValue(draw, depth + 1)]))
  }
}

/** Every path to a value inside `value`: ['layout', 'someGroups', 0], ... */
function pathsOf (value: unknown, at: Array<string | number> = []): Array<Array<string | number>> {
  if (typeof value !== 'object' || value === null) return [at]
  const inner = Object.entries(value).flatMap(([key, child]) => pathsOf(child, [...at, Array.isArray(value) ? Number(key) : key]))
  return at.length === 0 ? inner : [at, ...inner]
}

/** The stats with a few values changed, removed or added, where they are. */
function mutateFields (draw: Draw, stats: unknown): unknown {
  const copy = structuredClone(stats) as Record<string, unknown>
  for (let n = draw.int(1, 4); n > 0; n--) {
    const path = draw.pick(pathsOf(copy))
    if (path.length === 0) continue
    let parent = copy as Record<string | number, unknown>
    for (const key of path.slice(0, -1)) parent = parent[key] as Record<string | number, unknown>
    if (typeof parent !== 'object' || parent === null) continue
    const key = path[path.length - 1]
    if (draw.chance(0.25)) delete parent[key]
    else parent[key] = anyValue(draw)
  }
  return copy
}

/** The text itself damaged: cut, spliced, garbled, or replaced. */
function mutateText (draw: Draw, text: string): string {
  switch (draw.below(6)) {
    case 0: return text.slice(0, draw.below(text.length + 1))
    case 1: { const at = draw.below(text.length + 1); return text.slice(0, at) + draw.pick(AWKWARD_STRINGS) + text.slice(at) }
    case 2: { const chars = [...text]; for (let n = draw.int(1, 5); n > 0; n--) chars[draw.below(chars.length)] = draw.text(1, 'any'); return chars.join('') }
    case 3: return draw.bytes(draw.int(0, 200)).toString('utf8')
    case 4: return draw.pick(['', '\ufeff' + text, 'null', '[]', '"text"', '1', '{}', text + text, '{"dataset":1}'])
    default: return text
  }
}

t.test('any text read back from a mount is printed as the stats table, or refused in one line', async t => {
  await fuzz(t, 'stats', { runs: 5000, seconds: 30 }, draw => {
    const base = draw.pick([singleStats, clusterStats])
    const value = draw.chance(0.8) ? mutateFields(draw, base) : base
    const text = draw.chance(0.4) ? mutateText(draw, JSON.stringify(value)) : JSON.stringify(value)
    let output: string
    try {
      output = formatStats(parseStats('/mnt/train', text), '/mnt/train')
    } catch (err) {
      expectOneLine(err, 'redirfs stats refused it')
      return
    }
    const rows = output.split('\n')
    for (const row of rows) {
      const problem = lineProblem(row) ?? (printable(row) !== row ? `a control character in ${JSON.stringify(row)}` : undefined)
      if (problem !== undefined && !problem.includes('characters long')) throw new Error(`a row of the table: ${problem}`)
      if (!/^[a-z]+ +\S/.test(row)) throw new Error(`a row that is not one of the table's: ${JSON.stringify(row.slice(0, 200))}`)
    }
  })
})
