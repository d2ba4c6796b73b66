// How long a pack index of an ImageNet-sized dataset takes to load, and
// what it costs in memory per file. Generates an index only (no sample
// bytes): 1000 classes x 1300 files with ImageNet-like names, then loads it
// in a fresh process and also builds the mount's layout from it.
//
//   node bench/index-scale.js [--files 1300000] [--classes 1000] [--out bench/results/index-scale]
//
// Writes <out>/latest.{json,md} with the commit and the command.
'use strict'
const { execFileSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const dist = path.join(__dirname, '..', 'dist')

/** The commit the figures come from, marked when the code differs from it. */
function codeVersion () {
  const git = (/** @type {string[]} */ ...a) => execFileSync('git', a, { cwd: path.join(__dirname, '..') }).toString().trim()
  const dirty = git('status', '--porcelain', '--untracked-files=no', '--', '.', ':!bench/results') !== ''
  return git('rev-parse', '--short', 'HEAD') + (dirty ? ' (with uncommitted changes)' : '')
}
const args = process.argv.slice(2)
/** @type {(name: string, fallback: string) => string} */
const text = (name, fallback) => { const i = args.indexOf(name); return i < 0 ? fallback : args[i + 1] }
/** @type {(name: string, fallback: number) => number} */
const option = (name, fallback) => Number(text(name, String(fallback)))

/** Loads the index in `dir` in this process (started with --expose-gc) and prints what it cost. */
function measureIndex (/** @type {string} */ dir) {
  const gc = /** @type {() => void} */ (global.gc)
  const { loadPackIndex } = require(path.join(dist, 'pack/pack-index.js'))
  const { buildLayout } = require(path.join(dist, 'redirect/layout.js'))
  const { planMemory } = require(path.join(dist, 'redirect/budget.js'))
  gc()
  const before = process.memoryUsage()
  let started = process.hrtime.bigint()
  loadPackIndex(dir).then((/** @type {any} */ pack) => {
    const loadSeconds = Number(process.hrtime.bigint() - started) / 1e9
    gc()
    const afterLoad = process.memoryUsage()
    started = process.hrtime.bigint()
    const memory = pack.header.sampleBytes / 4
    const layout = buildLayout(pack.tree.samples, { chunkSize: pack.header.chunkSize, seed: pack.header.seed, vcCount: planMemory(pack.tree.samples, pack.header.chunkSize, memory).vcCount })
    const layoutSeconds = Number(process.hrtime.bigint() - started) / 1e9
    gc()
    const afterLayout = process.memoryUsage()
    const files = pack.header.entries
    // external includes arrayBuffers (the typed arrays of the index)
    const perFile = (/** @type {NodeJS.MemoryUsage} */ after) => ((after.heapUsed + after.external - before.heapUsed - before.external) / files)
    console.log(JSON.stringify({
      entries: files,
      samples: pack.tree.samples.length,
      chunks: layout.pcs.length,
      loadSeconds: +loadSeconds.toFixed(2),
      layoutSeconds: +layoutSeconds.toFixed(2),
      bytesPerFileIndex: Math.round(perFile(afterLoad)),
      bytesPerFileWithLayout: Math.round(perFile(afterLayout)),
      heapBytesPerFile: Math.round((afterLoad.heapUsed - before.heapUsed) / files),
      externalBytesPerFile: Math.round((afterLoad.external - before.external) / files),
      rssMiB: Math.round(afterLayout.rss / 2 ** 20)
    }))
  })
}

if (args[0] === '--measure') measureIndex(args[1])
else writeAndMeasure()

/** Writes an ImageNet-sized index, measures it in a fresh process, and writes the results. */
function writeAndMeasure () {
  const { allocateArrays, encodeIndex, PACK_VERSION, NO_CHUNK } = require(path.join(dist, 'pack/format.js'))
  const classes = option('--classes', 1000)
  const total = option('--files', 1_300_000)
  const perClass = Math.ceil(total / classes)
  const paths = ['']
  for (let c = 0; c < classes; c++) {
    const wnid = `n${String(1440764 + c * 7919).padStart(8, '0')}`
    paths.push(wnid)
    for (let i = 0; i < perClass && paths.length - classes - 1 < total; i++) paths.push(`${wnid}/${wnid}_${10000 + i * 13}.JPEG`)
  }
  paths.sort()
  const samples = paths.filter(p => p.includes('/')).length
  const chunks = Math.ceil(samples / 64) + classes
  const arrays = allocateArrays(paths.length, chunks)
  let pathEnd = 0
  paths.forEach((p, i) => {
    const isDir = !p.includes('/')
    arrays.kind[i] = isDir ? 0 : 1
    arrays.mode[i] = isDir ? 0o40755 : 0o100644
    arrays.size[i] = isDir ? 4096 : 110_000
    arrays.mtimeMs[i] = arrays.atimeMs[i] = arrays.ctimeMs[i] = 1.7e12
    arrays.chunk[i] = NO_CHUNK
    pathEnd += Buffer.byteLength(p)
    arrays.pathEnd[i] = pathEnd
  })
  // Give samples the chunks the layout will compute, as a real pack has them.
  const { cutPhysicalChunks } = require(path.join(dist, 'redirect/layout.js'))
  const { groupOf } = require(path.join(dist, 'redirect/grouping.js'))
  const sampleIndex = /** @type {[string, number][]} */ (paths.map((p, i) => [p, i])).filter(([p]) => p.includes('/'))
  const chunking = cutPhysicalChunks(sampleIndex.map(([p]) => ({ path: p, size: 110_000, group: groupOf(p, undefined) })), 64, 0)
  chunking.chunksOfGroup.flat().forEach((/** @type {number[]} */ files, /** @type {number} */ c) => files.forEach(f => { arrays.chunk[sampleIndex[f][1]] = c }))
  const header = { format: 'redirfs-pack', version: PACK_VERSION, chunkSize: 64, seed: 0, entries: paths.length, samples, chunks: chunking.chunksOfGroup.flat().length, pathBytes: pathEnd, sampleBytes: samples * 110_000, createdAt: new Date().toISOString(), segments: 1, segmentSize: 256 * 2 ** 20 }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'redirfs-index-'))
  const index = encodeIndex(header, { ...arrays, chunkOffset: arrays.chunkOffset.subarray(0, header.chunks), chunkLength: arrays.chunkLength.subarray(0, header.chunks), chunkCrc: arrays.chunkCrc.subarray(0, header.chunks), chunkSegment: arrays.chunkSegment.subarray(0, header.chunks) }, Buffer.from(paths.join('')))
  fs.writeFileSync(path.join(dir, 'index.bin'), index)
  try {
    const measured = JSON.parse(execFileSync(process.execPath, ['--expose-gc', __filename, '--measure', dir]).toString())
    const result = { commit: codeVersion(), command: ['node', 'bench/index-scale.js', ...args].join(' '), classes, indexMiB: +(index.length / 2 ** 20).toFixed(1), ...measured }
    const out = text('--out', path.join(__dirname, 'results', 'index-scale'))
    fs.mkdirSync(out, { recursive: true })
    fs.writeFileSync(path.join(out, 'latest.json'), JSON.stringify(result, null, 2) + '\n')
    fs.writeFileSync(path.join(out, 'latest.md'), [
      `Run on commit ${result.commit}: \`${result.command}\``, '',
      `A generated pack index of ${result.entries} entries (${result.samples} samples in ${classes} classes, K=64), loaded in a fresh process:`, '',
      '| measure | value |', '|---|---|',
      `| index file | ${result.indexMiB} MiB |`,
      `| load | ${result.loadSeconds} s |`,
      `| layout after it | ${result.layoutSeconds} s |`,
      `| bytes per file, index | ${result.bytesPerFileIndex} (JS heap ${result.heapBytesPerFile}, typed arrays ${result.externalBytesPerFile}) |`,
      `| bytes per file, index and layout | ${result.bytesPerFileWithLayout} |`,
      `| process RSS after both | ${result.rssMiB} MiB |`, ''].join('\n'))
    console.log(JSON.stringify(result, null, 2))
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}
