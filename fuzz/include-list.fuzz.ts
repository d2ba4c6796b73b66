// Fuzzes the include list (`--include`, src/chunks/scan.ts readIncludeList)
// and what a scan makes of it: lists built from a dataset's real sample
// paths, then written as users (and editors, and scripts gone wrong) write
// them: ./ prefixes, spaces around, CRLF line ends, comments, a byte-order
// mark, duplicates, absolute paths, "..", empty components, directories,
// non-samples, missing files, very long lines, NULs, bytes that are not
// UTF-8, or random bytes. The property: the list is read or refused in
// one line; a scan with it (and with --skip-unservable, by chance) shows
// exactly the listed samples of the source, or refuses it in one line.
import { promises as fs, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { readIncludeList, scanTree } from '../src/chunks/scan'
import { AWKWARD_STRINGS, type Draw } from './draw'
import { expectOneLine, fuzz } from './run'

// A small ImageFolder: a scan per case stays quick.
const root = mkdtempSync(path.join(os.tmpdir(), 'redirfs-fuzz-include-'))
const samples: string[] = []
for (const label of ['ant', 'bee', 'cat dog', 'é']) {
  for (let i = 0; i < 4; i++) {
    const relative = `${label}/${i % 2 === 0 ? 'sub/' : ''}img ${i}.jpg`
    mkdirSync(path.dirname(path.join(root, relative)), { recursive: true })
    writeFileSync(path.join(root, relative), `${relative}\n`)
    samples.push(relative)
  }
}
writeFileSync(path.join(root, 'ant', 'labels.txt'), 'not a sample\n')
const list = path.join(root, '..', `${path.basename(root)}.list`)
t.teardown(async () => {
  await fs.rm(root, { recursive: true, force: true })
  await fs.rm(list, { force: true })
})

/** One line of a list: a sample's path, perhaps as a user wrote it, or something else altogether. */
function line (draw: Draw): string {
  const sample = draw.pick(samples)
  switch (draw.below(12)) {
    case 0: return `./${sample}`
    case 1: return `  ${sample}\t `
    case 2: return `${sample}\r`
    case 3: return `# ${sample}`
    case 4: return `/${sample}`
    case 5: return draw.pick([`${sample}/..`, `../${sample}`, sample.replace('/', '//'), sample.replace('/', '/./'), `${sample}/`])
    case 6: return draw.pick(['ant', 'ant/sub', 'ant/labels.txt', 'missing/x.jpg', '.redirfs/stats', 'ant/img 9.jpg'])
    case 7: return draw.pick(AWKWARD_STRINGS)
    case 8: return draw.text(draw.int(0, 40), 'any')
    case 9: return sample.repeat(draw.pick([2, 50, 2000]))
    default: return sample
  }
}

function listBytes (draw: Draw): Buffer {
  if (draw.chance(0.1)) return draw.bytes(draw.int(0, 300))
  const lines = Array.from({ length: draw.int(0, 12) }, () => line(draw))
  let bytes = Buffer.from(lines.join(draw.chance(0.8) ? '\n' : '\r\n') + (draw.chance(0.5) ? '\n' : ''))
  if (draw.chance(0.1)) bytes = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), bytes])
  if (draw.chance(0.15) && bytes.length > 0) bytes[draw.below(bytes.length)] = draw.pick([0x00, 0xff, 0xc3, 0x80, 0x0a])
  return bytes
}

t.test('any include list is read or refused in one line, and a scan shows exactly its samples or refuses it in one line', async t => {
  await fuzz(t, 'include-list', { runs: 1000, seconds: 30 }, async draw => {
    writeFileSync(list, listBytes(draw))
    let include: Set<string>
    try {
      include = await readIncludeList(list)
    } catch (err) {
      expectOneLine(err, 'readIncludeList refused it')
      return
    }
    const skipUnservable = draw.chance(0.3)
    let shown: string[]
    try {
      const tree = await scanTree(root, { include, skipUnservable })
      shown = tree.samples.map(sample => sample.path).sort()
    } catch (err) {
      expectOneLine(err, 'the scan refused it')
      return
    }
    const listed = samples.filter(sample => include.has(sample)).sort()
    if (JSON.stringify(shown) !== JSON.stringify(listed)) throw new Error(`the scan shows ${JSON.stringify(shown)}, the list names ${JSON.stringify(listed)}`)
  })
})
