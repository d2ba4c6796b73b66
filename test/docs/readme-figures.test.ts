// Every figure in the README and in every page of docs/ comes from a
// committed results file, made by a committed command: each section that
// quotes measurements cites its results (`bench/results/<file>`, or
// `bench/results/<file>@<commit>` for an earlier run kept in git), and every
// figure it quotes is found in them.
import { execFileSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'

const ROOT = path.join(__dirname, '..', '..')
/** The README and the docs pages, each read as the README is. */
const PAGES = ['README.md', ...readdirSync(path.join(ROOT, 'docs')).filter(name => name.endsWith('.md')).map(name => `docs/${name}`)]
const README = PAGES.map(page => {
  // Each page's headings name the page (a code block's comment lines are not headings).
  let code = false
  return readFileSync(path.join(ROOT, page), 'utf8').split('\n').map(line => {
    if (line.startsWith('```')) code = !code
    return !code && /^#{1,3} /.test(line) ? line.replace(/^(#{1,3}) /, `$1 ${page}: `) : line
  }).join('\n')
}).join('\n')

/** Figures the README states as promises or definitions, not measurements, each with why. */
const STATED = [
  '1.5', // the memory bound per file the README promises and test/daemon/memory.test.ts checks
  '1.00' // requests per remote sample without prefetch: one request each, by definition
]

interface Section { heading: string, lines: string[] }

function sections (): Section[] {
  const found: Section[] = []
  let code = false
  for (const line of README.split('\n')) {
    if (line.startsWith('```')) code = !code
    if (!code && /^#{1,3} /.test(line)) found.push({ heading: line, lines: [] })
    else found.at(-1)?.lines.push(line)
  }
  return found
}

interface Citation { cited: string, file: string, commit?: string }

/** `bench/results/x.md`, `bench/results/latest.{json,md}`, `bench/results/x.md@abc1234`; directories name no figures. */
function citations (text: string): Citation[] {
  const result: Citation[] = []
  for (const [cited, stem, braces, tail, commit] of text.matchAll(/(bench\/results\/[\w./-]*?)(?:\{([\w,]+)\}([\w.]*))?(?:@([0-9a-f]{7,40}))?(?=[\s`),;:]|$)/g)) {
    const files = braces === undefined ? [stem.replace(/\.$/, '')] : braces.split(',').map(b => stem + b + tail)
    for (const file of files) result.push({ cited, file, commit })
  }
  return result
}

function citedText ({ file, commit }: Citation): string | undefined {
  if (commit !== undefined) {
    try { return execFileSync('git', ['show', `${commit}:${file}`], { cwd: ROOT, stdio: ['ignore', 'pipe', 'ignore'] }).toString() } catch { return undefined }
  }
  const full = path.join(ROOT, file)
  if (!existsSync(full)) return undefined
  return statSync(full).isFile() ? readFileSync(full, 'utf8') : ''
}

/** A target is what a figure is measured against, not a figure: "(target 1.5x PyTorch)", "targets 0.5 and 0.8: missed". */
const withoutTargets = (text: string): string => text.replace(/\btargets? [^;:)|]*/gi, '').replace(/`[^`]*`/g, '')

/** Figures of a text: numbers with a decimal point (and their unit x or %); a range a-b gives both ends. */
function decimals (text: string): string[] {
  const found: string[] = []
  const rest = withoutTargets(text).replace(/(?<![\w.])(\d+\.\d+)-(\d+\.\d+)(x|%)?/g, (_, a, b, unit = '') => { found.push(a + unit, b + unit); return ' ' })
  for (const [figure] of rest.matchAll(/(?<![\w./-])\d+\.\d+(?:x|%)?(?![\w.]*\w)/g)) found.push(figure)
  return found
}

const appearsIn = (figure: string, text: string): boolean =>
  new RegExp(`(?<![\\d.])${figure.replace(/\./g, '\\.')}(?![\\d])`).test(text) ||
  new RegExp(`(?<![\\d.])${figure.replace(/,/g, '').replace(/\./g, '\\.')}(?![\\d])`).test(text)

function tableRows (lines: string[]): string[] {
  const rows: string[] = []
  let header = true
  for (const line of lines) {
    if (!line.startsWith('|')) { header = true; continue }
    if (/^\|[-| :]+\|$/.test(line)) continue
    if (header) { header = false; continue }
    rows.push(line)
  }
  return rows
}

function proseLines (lines: string[]): string[] {
  let inCode = false
  return lines.filter(line => {
    if (line.startsWith('```')) { inCode = !inCode; return false }
    return !inCode && !line.startsWith('|') && !line.startsWith('<!--') && !line.startsWith('Run ')
  })
}

t.test('every results file the README cites exists and names the commit and the command that made it', async t => {
  const all = citations(README)
  t.ok(all.length >= 8, `${all.length} citations`)
  for (const citation of all) {
    const text = citedText(citation)
    t.not(text, undefined, `${citation.cited} exists`)
    if (text === undefined || text === '' || !citation.file.endsWith('.md')) continue
    if (citation.commit === undefined) t.match(text, /commit [0-9a-f]{7,}/, `${citation.file} names its commit`)
    t.match(text, /`(npm run [\w:]+|node bench\/|\/usr\/bin\/python3 bench\/|python3 bench\/|bash bench\/|redirfs simulate)[^`]*`/, `${citation.file} names its command`)
  }
})

t.test('every number in a table under a results citation is in the cited results', async t => {
  for (const { heading, lines } of sections()) {
    const cited = citations(lines.join('\n')).map(citedText).filter((text): text is string => text !== undefined).join('\n')
    const rows = tableRows(lines)
    if (cited === '' || rows.length === 0) continue
    const missing = rows.flatMap(row => [...withoutTargets(row).matchAll(/\d[\d,]*(?:\.\d+)?/g)].map(([n]) => n)).filter(n => !appearsIn(n, cited))
    t.same(missing, [], `${heading}: every table figure found in ${citations(lines.join('\n')).map(c => c.cited).join(', ')}`)
  }
})

t.test('a table with no results citation holds no measured figures, only small whole numbers', async t => {
  for (const { heading, lines } of sections()) {
    if (citations(lines.join('\n')).length > 0) continue
    const figures = tableRows(lines).flatMap(row => [...withoutTargets(row).matchAll(/\d[\d,]*(?:\.\d+)?%?/g)].map(([n]) => n))
    t.same(figures.filter(n => !/^\d{1,2}$/.test(n)), [], `${heading}: no figure without a source`)
  }
})

t.test("every decimal figure in the README's prose is in the results its section cites", async t => {
  for (const { heading, lines } of sections()) {
    const cited = citations(lines.join('\n')).map(citedText).filter((text): text is string => text !== undefined).join('\n')
    const missing = decimals(proseLines(lines).join('\n')).filter(figure => !STATED.includes(figure) && !appearsIn(figure, cited))
    t.same(missing, [], `${heading}: prose figures found in its results`)
  }
})
