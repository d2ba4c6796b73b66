// Reads a TAP log (tap's own output, subtests indented) and prints each
// failed assertion with the subtests it sits in and its diagnostics, a few
// lines each. CI shows only the end of a run's output, where tap's report
// says how many failed but not which: scripts/test.sh prints this there.
// Usage: node scripts/tap-failures.mjs LOG
import { readFileSync } from 'node:fs'

const DIAG_LINES = 12 // of each failure's YAML block: enough for at, found, wanted, message
const FAILURES_SHOWN = 40
const HIDDEN = new Set(['stack', 'source', 'tapCaught', 'typeName', 'methodName', 'functionName'])

const lines = readFileSync(process.argv[2], 'utf8').split('\n')
const indentOf = line => line.length - line.trimStart().length
const subtests = [] // [{ indent, name }], outermost first
const failures = []
for (let i = 0; i < lines.length; i++) {
  const line = lines[i]
  const indent = indentOf(line)
  const body = line.trimStart()
  while (subtests.length > 0 && subtests.at(-1).indent > indent) subtests.pop()
  if (body.startsWith('# Subtest: ')) {
    while (subtests.length > 0 && subtests.at(-1).indent >= indent) subtests.pop()
    subtests.push({ indent, name: body.slice('# Subtest: '.length), failuresBefore: failures.length })
    continue
  }
  if (!/^not ok \d+/.test(body) || /# (TODO|SKIP)/i.test(body)) continue
  // A failed subtest's own line follows its failed assertions: those are listed already.
  const own = subtests.find(s => s.indent === indent && body.replace(/ # time=.*$/, '').endsWith(` - ${s.name}`))
  if (own !== undefined && failures.length > own.failuresBefore) continue
  const within = subtests.filter(s => s.indent < indent || s === own).map(s => s.name)
  const diag = []
  if (lines[i + 1]?.trim() === '---') {
    const block = []
    let j = i + 2
    for (; j < lines.length && lines[j].trim() !== '...'; j++) block.push(lines[j])
    diag.push(...briefly(block))
    i = j // what the block quotes (a diff of TAP, say) is not TAP
  }
  failures.push({ path: within, line: body, diag })
}

/** A failure's YAML, in brief: where it failed, and each key but the stack and the source quoted. */
function briefly (block) {
  const base = Math.min(...block.filter(line => line.trim() !== '').map(indentOf))
  const where = {}
  const kept = []
  let key = ''
  for (const line of block) {
    if (line.trim() === '') continue
    const top = indentOf(line) === base
    if (top) key = line.trim().split(':')[0]
    if (key === 'at') {
      const [name, value] = line.trim().split(': ')
      if (!top) where[name] = value
    } else if (!HIDDEN.has(key)) {
      kept.push(line.slice(base))
    }
  }
  const at = where.fileName === undefined ? [] : [`at: ${where.fileName}:${where.lineNumber ?? '?'}`]
  return [...at, ...kept].slice(0, DIAG_LINES)
}

if (failures.length > 0) {
  console.log(`\n# ${failures.length} failed (listed again here, from ${process.argv[2]}):`)
  for (const failure of failures.slice(0, FAILURES_SHOWN)) {
    console.log(`# ${failure.path.join(' > ')}\n#   ${failure.line}`)
    for (const diag of failure.diag) console.log(`#     ${diag}`)
  }
  if (failures.length > FAILURES_SHOWN) console.log(`# ... and ${failures.length - FAILURES_SHOWN} more in the log`)
}
