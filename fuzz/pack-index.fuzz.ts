// Fuzzes the pack index and the reads it leads to. Real indexes, written by
// `redirfs pack` from generated datasets in several shapes (segments, a
// coarser grouping, the shards of a two-node pack, train/val splits, the
// shared layout), are
// mutated where it matters: counts, offsets, sizes, path ends, path bytes,
// kinds and modes, the header's JSON, whole entries dropped or moved, chunks
// made to overlap, the first finding's crafted sample; then the CRC is made
// right again so the mutation gets past it. The property: the mount's own
// steps (decodeIndex, loadPackIndex, the layout and checkPackLayout, the
// native server's tree) either refuse the index with one line (a
// UsageError, short, never "unexpected error"), or accept it, and then
// every read the pack source makes for every chunk of the layout, whole and
// in blocks, with and without the disk cache, stays inside that chunk,
// never throws and never hangs; what it delivers is what the index says.
// The mutants refused latest are then checked as real CLI runs of
// `redirfs verify` and `redirfs mount`: exit 1, one line, nothing mounted.
import { promises as fs, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { crc32 } from 'node:zlib'
import pino from 'pino'
import t from 'tap'
import { SampleBuffers } from '../src/chunks/sample-buffers'
import type { ChunkRead } from '../src/chunks/native'
import { chooseLayout, openPack } from '../src/daemon/daemon'
import type { MountConfig } from '../src/daemon/config'
import { loadNativeServer } from '../src/fs/native-mount'
import { decodeIndex, encodeIndex, EntryKind, PACK_MAGIC, type PackArrays, type PackHeader } from '../src/pack/format'
import { DirectoryPackStorage, type PackStorage, type Pieces } from '../src/pack/storage'
import type { FileId } from '../src/redirect/layout'
import { generateDataset } from '../test/helpers/dataset'
import { emptyDir, forceUnmount, isMounted, redirfs } from '../test/helpers/mount'
import { AWKWARD_NUMBERS, AWKWARD_STRINGS, type Draw } from './draw'
import { expectOneLine, fuzz, lineProblem } from './run'

const work = mkdtempSync(path.join(os.tmpdir(), 'redirfs-fuzz-pack-'))
const datasets = [generateDataset(31), generateDataset(32, { splits: true })]
t.teardown(async () => {
  for (const dir of [work, ...datasets.map(d => d.root)]) await fs.rm(dir, { recursive: true, force: true })
})

/** A pack as written: its directory and index. */
interface Base { name: string, dir: string, index: Buffer }
const bases: Base[] = []

t.before(async () => {
  const shapes: Array<[string, number, string[]]> = [
    ['segments', 0, ['--chunk-size', '4', '--seed', '3', '--segment-size', '64K']],
    ['groups', 0, ['--chunk-size', '3', '--group-depth', '1']],
    ['shards', 0, ['--chunk-size', '4', '--nodes', '2', '--segment-size', '32K']],
    ['splits', 1, ['--chunk-size', '2', '--segment-size', '48K']],
    ['shared', 0, ['--chunk-size', '5', '--layout', 'shared', '--segment-size', '64K']]
  ]
  await Promise.all(shapes.map(async ([name, dataset, options]) => {
    const out = path.join(work, name)
    const packed = await redirfs('pack', datasets[dataset].root, out, ...options)
    if (packed.code !== 0) throw new Error(`redirfs pack ${name}: ${packed.stderr}`)
  }))
  for (const [name, , options] of shapes) {
    const dirs = options.includes('--nodes') ? [0, 1].map(node => path.join(work, name, `node-${node}`)) : [path.join(work, name)]
    for (const dir of dirs) bases.push({ name: path.relative(work, dir), dir, index: readFileSync(path.join(dir, 'index.bin')) })
  }
  const segments = decodeIndex(bases[0].index, 'index.bin').header.segments
  if (segments < 2) throw new Error(`the segments pack has ${segments} segment: the fuzzer needs several`)
})

// ---------------------------------------------------------------- mutation

type Arrays = Record<keyof PackArrays, Float64Array | Uint32Array | Uint8Array>
interface Parts { header: Record<string, unknown>, arrays: Arrays, paths: Buffer }

const ENTRY_F64 = ['size', 'atimeMs', 'mtimeMs', 'ctimeMs', 'location'] as const
const ENTRY_U32 = ['mode', 'uid', 'gid', 'crc', 'chunk', 'pathEnd', 'atimeNsec', 'mtimeNsec', 'ctimeNsec'] as const
const ENTRY_COLUMNS = [...ENTRY_F64, ...ENTRY_U32, 'kind'] as const
const HEADER_KEYS = ['format', 'version', 'chunkSize', 'seed', 'entries', 'samples', 'chunks', 'pathBytes', 'sampleBytes', 'createdAt', 'groupDepth', 'nodes', 'node', 'segments', 'segmentSize', 'layout', 'extra']
const MODES = [0o40755, 0o100644, 0o120777, 0o20666, 0o60660, 0o10644, 0o140755, 0o104755, 0o100000, 0o177777, 0xffffffff]

function partsOf (index: Buffer): Parts {
  const { header, arrays, paths } = decodeIndex(index, 'index.bin')
  const copied = Object.fromEntries(Object.entries(arrays).map(([name, column]) => [name, (column as Float64Array).slice()])) as unknown as Arrays
  return { header: { ...header }, arrays: copied, paths: Buffer.from(paths) }
}

function entriesOf (parts: Parts): number { return parts.arrays.size.length }
function chunksOf (parts: Parts): number { return parts.arrays.chunkOffset.length }
function samplesOf (parts: Parts): number[] {
  const samples: number[] = []
  parts.arrays.kind.forEach((kind, i) => { if (kind === EntryKind.Sample) samples.push(i) })
  return samples
}

/** A JSON value for a header field: near what it was, or of another type altogether. */
function headerValue (draw: Draw, current: unknown): unknown {
  switch (draw.below(8)) {
    case 0: return undefined
    case 1: return draw.pick(AWKWARD_STRINGS)
    case 2: return draw.pick([null, true, false, [], {}, [1], { a: 1 }, '4', '1e3'])
    case 3: return draw.pick(AWKWARD_NUMBERS)
    // Each layout where the other was written: chunks cut one way, read the other.
    case 4: return draw.pick(['class', 'shared'])
    default: return typeof current === 'number' ? draw.numberNear(current) : draw.int(-2, 70000)
  }
}

/** The mutations, each as a malicious index writer (or a damaged disk) could make it. */
const MUTATIONS: Array<(draw: Draw, parts: Parts) => void> = [
  // A header field changed, removed or added.
  (draw, { header }) => {
    const key = draw.pick(HEADER_KEYS)
    const value = headerValue(draw, header[key])
    if (value === undefined) delete header[key]
    else header[key] = value
  },
  // A number of an entry: near its value, awkward, or another entry's.
  (draw, parts) => {
    const name = draw.pick(ENTRY_F64)
    const column = parts.arrays[name]
    const i = draw.chance(0.7) ? draw.pick(samplesOf(parts)) : draw.below(column.length)
    column[i] = draw.chance(0.8) ? draw.numberNear(column[i]) : column[draw.below(column.length)]
  },
  (draw, parts) => {
    const name = draw.pick(ENTRY_U32)
    const column = parts.arrays[name]
    const i = draw.below(column.length)
    column[i] = name === 'mode' && draw.chance(0.6) ? draw.pick(MODES) : draw.chance(0.8) ? draw.numberNear(column[i]) : column[draw.below(column.length)]
  },
  // A kind, and with it perhaps the mode that goes with it.
  (draw, { arrays }) => {
    const i = draw.below(arrays.kind.length)
    arrays.kind[i] = draw.pick([0, 1, 2, 3, 255])
    if (draw.chance(0.5)) arrays.mode[i] = arrays.kind[i] === EntryKind.Directory ? 0o40755 : 0o100644
  },
  // A chunk's offset, length, CRC or segment.
  (draw, { arrays }) => {
    const c = draw.below(arrays.chunkOffset.length)
    const name = draw.pick(['chunkOffset', 'chunkLength', 'chunkCrc', 'chunkSegment'] as const)
    arrays[name][c] = draw.numberNear(arrays[name][c])
  },
  // A byte of a path: a separator, a dot, a 0 byte, a byte that is not UTF-8.
  (draw, { paths }) => {
    if (paths.length > 0) paths[draw.below(paths.length)] = draw.pick([0x2f, 0x2e, 0x00, 0xff, 0xc3, 0x61, 0x7a, 0x20, draw.int(0, 255)])
  },
  // Bytes inserted into a path, the path ends after it moved along (or not).
  (draw, parts) => {
    const entry = draw.int(1, entriesOf(parts) - 1)
    const at = parts.arrays.pathEnd[entry]
    const inserted = Buffer.from(draw.pick(['/..', '/', '.', 'x', '\0', '/./', 'é']))
    parts.paths = Buffer.concat([parts.paths.subarray(0, at), inserted, parts.paths.subarray(at)])
    if (draw.chance(0.8)) {
      for (let i = entry; i < entriesOf(parts); i++) parts.arrays.pathEnd[i] += inserted.length
      parts.header.pathBytes = parts.paths.length
    }
  },
  // The first finding's crafted sample: starting 8192 bytes before its place, ending where it ended.
  (draw, parts) => {
    const i = draw.pick(samplesOf(parts))
    const back = draw.pick([8192, 4096, 1, parts.arrays.location[i] + 1, 2 ** 53])
    parts.arrays.location[i] -= back
    parts.arrays.size[i] += back
  },
  // Two samples' places swapped (a chunk's files in another order than the layout's).
  (draw, parts) => {
    const samples = samplesOf(parts)
    const [a, b] = [draw.pick(samples), draw.pick(samples)]
    for (const name of draw.chance(0.5) ? ['location'] as const : ['location', 'size', 'crc'] as const) {
      const held = parts.arrays[name][a]
      parts.arrays[name][a] = parts.arrays[name][b]
      parts.arrays[name][b] = held
    }
  },
  // A sample moved to another chunk, its place made to fit there.
  (draw, parts) => {
    const i = draw.pick(samplesOf(parts))
    const c = draw.below(chunksOf(parts))
    parts.arrays.chunk[i] = c
    parts.arrays.location[i] = parts.arrays.chunkOffset[c] + draw.below(Math.max(1, parts.arrays.chunkLength[c]))
  },
  // A chunk made to overlap the one before, its files moved with it.
  (draw, parts) => {
    const c = draw.int(1, Math.max(1, chunksOf(parts) - 1))
    if (c >= chunksOf(parts)) return
    const delta = parts.arrays.chunkOffset[c - 1] - parts.arrays.chunkOffset[c]
    parts.arrays.chunkOffset[c] += delta
    parts.arrays.chunkSegment[c] = parts.arrays.chunkSegment[c - 1]
    samplesOf(parts).forEach(i => { if (parts.arrays.chunk[i] === c) parts.arrays.location[i] += delta })
  },
  // A chunk grown, and one of its files with it (the files still fill it).
  (draw, parts) => {
    const i = draw.pick(samplesOf(parts))
    const grow = draw.pick([1, 4096, 2 ** 20, 2 ** 31, 2 ** 40, 2 ** 52])
    parts.arrays.size[i] += grow
    parts.arrays.chunkLength[parts.arrays.chunk[i]] += grow
    if (draw.chance(0.7)) parts.header.sampleBytes = (parts.header.sampleBytes as number) + grow
    samplesOf(parts).forEach(j => { if (parts.arrays.chunk[j] === parts.arrays.chunk[i] && parts.arrays.location[j] > parts.arrays.location[i]) parts.arrays.location[j] += grow })
  },
  // A whole entry dropped, or repeated, the header's counts kept right (or not).
  (draw, parts) => {
    const entry = draw.int(1, entriesOf(parts) - 1)
    const repeat = draw.chance(0.5)
    const rows = (n: number): number[] => Array.from({ length: n }, (_, i) => i).flatMap(i => (i === entry ? (repeat ? [i, i] : []) : [i]))
    const keep = rows(entriesOf(parts))
    const start = parts.arrays.pathEnd[entry - 1]
    const end = parts.arrays.pathEnd[entry]
    const name = parts.paths.subarray(start, end)
    parts.paths = Buffer.concat(repeat ? [parts.paths.subarray(0, end), name, parts.paths.subarray(end)] : [parts.paths.subarray(0, start), parts.paths.subarray(end)])
    const shift = repeat ? end - start : start - end
    for (const column of ENTRY_COLUMNS) {
      const old = parts.arrays[column]
      const made = new (old.constructor as Float64ArrayConstructor)(keep.length)
      keep.forEach((from, to) => { made[to] = old[from] })
      parts.arrays[column] = made
    }
    for (let i = repeat ? entry + 1 : entry; i < keep.length; i++) parts.arrays.pathEnd[i] += shift
    if (draw.chance(0.8)) {
      parts.header.entries = keep.length
      parts.header.pathBytes = parts.paths.length
      if (parts.arrays.kind[Math.min(entry, keep.length - 1)] === EntryKind.Sample) parts.header.samples = samplesOf(parts).length
    }
  },
  // A count and the sections it sizes changed together: more chunks, or fewer.
  (draw, parts) => {
    const chunks = Math.max(0, chunksOf(parts) + draw.pick([-1, 1, 2]))
    for (const name of ['chunkOffset', 'chunkLength', 'chunkCrc', 'chunkSegment'] as const) {
      const old = parts.arrays[name]
      const made = new (old.constructor as Float64ArrayConstructor)(chunks)
      made.set(old.subarray(0, chunks))
      parts.arrays[name] = made
    }
    parts.header.chunks = chunks
  }
]

/** The bytes of the index after field mutations, then perhaps damage to the bytes themselves; the CRC made right again (mostly). */
function mutant (draw: Draw, base: Buffer): Buffer {
  const parts = partsOf(base)
  for (let n = draw.int(1, 3); n > 0; n--) draw.pick(MUTATIONS)(draw, parts)
  let body = encodeIndex(parts.header as unknown as PackHeader, parts.arrays as unknown as PackArrays, parts.paths)
  body = body.subarray(0, body.length - 4)
  if (draw.chance(0.25)) body = damageBytes(draw, body)
  const crc = Buffer.alloc(4)
  crc.writeUInt32LE(draw.chance(0.95) ? crc32(body) : draw.u32())
  return Buffer.concat([body, crc])
}

/** Damage below the structure: bytes of the header's JSON or of any section, the header's length, bytes cut or added. */
function damageBytes (draw: Draw, body: Buffer): Buffer {
  const jsonStart = PACK_MAGIC.length + 8
  const jsonLength = body.readUInt32LE(PACK_MAGIC.length + 4)
  const copy = Buffer.from(body)
  switch (draw.below(6)) {
    case 0: { // a character of the JSON
      copy[jsonStart + draw.below(jsonLength)] = draw.pick([0x22, 0x7b, 0x7d, 0x2c, 0x3a, 0x30, 0x2d, 0x65, 0x00, 0xff, 0x5c])
      return copy
    }
    case 1: { // text inserted into the JSON, its length kept right (or not)
      const at = jsonStart + draw.below(jsonLength)
      const text = Buffer.from(draw.pick([',"entries":1e400', ',"chunks":-1', '"', ',"__proto__":{"x":1}', ' '.repeat(9), ',"samples":1,"samples":2', 'é']))
      const grown = Buffer.concat([copy.subarray(0, at), text, copy.subarray(at)])
      if (draw.chance(0.8)) grown.writeUInt32LE(jsonLength + text.length, PACK_MAGIC.length + 4)
      return grown
    }
    case 2: { // the header's length
      copy.writeUInt32LE(draw.pick([0, jsonLength - 1, jsonLength + 1, 2 ** 20, 2 ** 32 - 1, draw.u32()]), PACK_MAGIC.length + 4)
      return copy
    }
    case 3: { // bits of any section
      for (let n = draw.int(1, 4); n > 0; n--) copy[draw.int(jsonStart, copy.length - 1)] ^= 1 << draw.below(8)
      return copy
    }
    case 4: return copy.subarray(0, draw.int(0, copy.length)) // cut short
    default: return Buffer.concat([copy, draw.bytes(draw.pick([1, 7, 8, 4096]))]) // bytes added
  }
}

// ---------------------------------------------------------------- the mount's steps, checked

const silent = pino({ level: 'silent' })
/** A user's --memory: an index whose samples need more is refused (in one line) by the memory check. */
const MEMORY = 2 ** 30

/**
 * A pack's storage whose index is the mutant and whose segments are the
 * real pack's, noting every read that is not inside the chunk being read.
 */
class CheckedStorage implements PackStorage {
  readonly where: string
  private readonly real: DirectoryPackStorage
  /** The chunk being read, and its place as the (mutated, accepted) index has it. */
  chunk: { pc: number, segment: number, offset: number, length: number } | undefined
  readonly outside: string[] = []

  constructor (dir: string, private readonly index: Buffer) {
    this.where = dir
    this.real = new DirectoryPackStorage(dir)
  }

  async readIndex (): Promise<Buffer> { return this.index }
  async hasIndex (magic: Buffer): Promise<boolean> { return this.index.subarray(0, magic.length).equals(magic) }

  async readPieces (segment: number, offset: number, length: number, pieces: Pieces, targets: Buffer[]): Promise<ChunkRead> {
    this.check('readPieces', segment, offset, length)
    pieces.forEach((piece, i) => {
      if (!(piece.start >= 0 && piece.size >= 0 && piece.start + piece.size <= length) || targets[i].length < piece.size) this.outside.push(`piece ${i} (${piece.size} bytes at ${piece.start}) of a read of ${length} bytes, into ${targets[i].length}`)
    })
    return await this.real.readPieces(segment, offset, length, pieces, targets)
  }

  async readSegment (segment: number, offset: number, length: number): Promise<Buffer> {
    this.check('readSegment', segment, offset, length)
    return await this.real.readSegment(segment, offset, length)
  }

  async readOthers (offset: number, length: number): Promise<Buffer> { return await this.real.readOthers(offset, length) }
  stats (): Record<string, number | string> { return this.real.stats() }
  async close (): Promise<void> { await this.real.close() }

  private check (how: string, segment: number, offset: number, length: number): void {
    const c = this.chunk
    if (c === undefined) {
      this.outside.push(`${how} of segment ${segment} at ${offset} (${length} bytes) outside any chunk's read`)
    } else if (segment !== c.segment || !Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < c.offset || offset + length > c.offset + c.length) {
      this.outside.push(`${how} of segment ${segment} at ${offset} (${length} bytes) for chunk ${c.pc} (segment ${c.segment}, ${c.length} bytes at ${c.offset})`)
    }
  }
}

function mountConfig (dir: string, cache?: string): MountConfig {
  return {
    source: dir,
    mountpoint: path.join(work, 'unused-mountpoint'),
    memoryBytes: MEMORY,
    chunkSize: 64,
    chunkSizeGiven: false,
    mode: 'mix',
    seed: 0,
    skipUnservable: false,
    allowOther: false,
    fuseBackend: 'native',
    reopenWindowMs: 50,
    fuseThreads: 1,
    logLevel: 'silent',
    cache: cache === undefined ? undefined : { directory: cache, sizeBytes: 2 ** 30 }
  }
}

/** How far a mutant got: refused at a step, or accepted and read whole. */
type Outcome = 'decode' | 'load' | 'layout' | 'accepted'

/** The mount's steps on `index`, in a pack whose segments are `base`'s; throws where the property fails. */
async function mountSteps (draw: Draw, base: Base, index: Buffer): Promise<Outcome> {
  try {
    decodeIndex(index, path.join(base.dir, 'index.bin'))
  } catch (err) {
    expectOneLine(err, 'decodeIndex refused it')
    return 'decode'
  }
  const storage = new CheckedStorage(base.dir, index)
  const buffers = new SampleBuffers(64 * 2 ** 20)
  const cacheDir = draw.chance(0.25) ? await fs.mkdtemp(path.join(work, 'cache-')) : undefined
  // Whole chunks go through the cache only for a pack in a bucket: a directory pack is given one here to exercise its reads.
  let dataset
  try {
    dataset = await openPack(mountConfig(base.dir, cacheDir), buffers, silent, storage)
  } catch (err) {
    await storage.close()
    expectOneLine(err, 'loading the index refused it')
    return 'load'
  }
  try {
    const nodes = dataset.shard?.nodes ?? 1
    let layout
    try {
      layout = chooseLayout(dataset, { memoryBytes: MEMORY, mode: 'mix' }, nodes).layout
    } catch (err) {
      expectOneLine(err, 'the layout refused it')
      return 'layout'
    }
    // The native server takes the tree's columns as the mount gives them.
    const { FuseServer } = loadNativeServer()
    try {
      const server = new FuseServer({ ...dataset.tree.columns, controlName: 'x' } as unknown as object, () => {}, { reopenWindowMs: 0, fuseThreads: 1, ownerUid: 0, ownerGid: 0 })
      server.close()
    } catch (err) {
      throw new Error(`an index the pack's checks accepted has a tree the native server refuses: ${(err as Error).message}`)
    }
    const pack = (dataset.source as unknown as { pack: { arrays: PackArrays, sampleEntry: Uint32Array } }).pack
    const { arrays, sampleEntry } = pack
    for (let pc = 0; pc < layout.pcs.length; pc++) {
      const files = layout.pcs[pc].files
      const requests: FileId[][] = [[...files]]
      if (files.length > 1 && draw.chance(0.5)) {
        const from = draw.below(files.length)
        requests.push(files.slice(from, draw.int(from + 1, files.length)))
      }
      if (files.length > 2 && draw.chance(0.2)) requests.push(draw.subset(files.length, files.length - 1).map(i => files[i]))
      for (const request of requests) {
        storage.chunk = { pc, segment: arrays.chunkSegment[pc], offset: arrays.chunkOffset[pc], length: arrays.chunkLength[pc] }
        const delivered = await dataset.source.fetch({ pc, files: request })
        storage.chunk = undefined
        for (const [id, bytes] of delivered) {
          const entry = sampleEntry[id]
          if (!request.includes(id)) throw new Error(`chunk ${pc} delivered file ${id}, which was not asked for`)
          if (bytes.length !== arrays.size[entry] || crc32(bytes) !== arrays.crc[entry]) throw new Error(`chunk ${pc} delivered ${bytes.length} bytes for file ${id}, not its ${arrays.size[entry]} bytes of CRC ${arrays.crc[entry]}`)
          buffers.give(bytes)
        }
      }
    }
    if (storage.outside.length > 0) throw new Error(`reads outside their chunk: ${storage.outside.slice(0, 3).join('; ')}`)
    // The non-sample files: their bytes as the index says, or EIO, never another failure.
    for (let entry = 0; entry < arrays.kind.length; entry++) {
      if (arrays.kind[entry] !== EntryKind.Other) continue
      const relative = (pack as unknown as { path: (e: number) => string }).path(entry)
      await dataset.files.open(relative).then(async file => await file.close(), (err: unknown) => {
        if ((err as { errno?: string }).errno !== 'EIO') throw new Error(`opening ${relative} failed with ${(err as Error).stack}`)
      })
    }
    return 'accepted'
  } finally {
    await dataset.close()
    if (cacheDir !== undefined) await fs.rm(cacheDir, { recursive: true, force: true })
  }
}

/** Mutants refused at the latest step, for the CLI runs: one per step and base at most. */
const worst = new Map<string, { base: Base, index: Buffer, outcome: Outcome, seed: number }>()
const LATE: Outcome[] = ['layout', 'load']

t.test('every mutant index is refused in one line, or read only inside its chunks', async t => {
  const outcomes = new Map<Outcome, number>()
  await fuzz(t, 'pack-index', { runs: 400, seconds: 60 }, async draw => {
    const base = draw.pick(bases)
    const index = mutant(draw, base.index)
    const outcome = await mountSteps(draw, base, index)
    outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1)
    if (LATE.includes(outcome) && !worst.has(`${outcome}:${base.name}`) && worst.size < 3) worst.set(`${outcome}:${base.name}`, { base, index, outcome, seed: draw.seed })
  })
  t.comment(`mutants refused when decoded, loaded, laid out; accepted and read: ${['decode', 'load', 'layout', 'accepted'].map(o => outcomes.get(o as Outcome) ?? 0).join(', ')}`)
})

t.test('the worst mutants are refused by redirfs verify and redirfs mount: exit 1, one line, nothing mounted', async t => {
  const chosen = [...worst.values()]
  if (chosen.length === 0) t.comment('no mutant was refused after decoding in this run')
  for (const { base, index, outcome, seed } of chosen) {
    const copy = path.join(work, `cli-${seed}`)
    await fs.cp(base.dir, copy, { recursive: true })
    writeFileSync(path.join(copy, 'index.bin'), index)
    const what = `case ${seed} (${base.name}, refused at ${outcome}; reproduce: npm run fuzz -- pack-index --seed ${seed} --runs 1)`
    const shard = base.name.includes('node-') ? ['--node', base.name.slice(-1), '--peers', '127.0.0.1:1,127.0.0.1:2', '--token-file', '/nonexistent'] : []
    for (const command of [['verify', copy], ['mount', copy, emptyDir(), '--memory', '1G', ...shard]]) {
      if (command[0] === 'mount') t.teardown(async () => { await forceUnmount(command[2]) })
      const result = await redirfs(...command)
      const line = result.stderr.trimEnd()
      t.equal(result.code, 1, `${command[0]} of ${what} exits 1: ${line}`)
      t.notOk(lineProblem(line), `${command[0]} of ${what} says why in one line: ${lineProblem(line) ?? line}`)
      if (command[0] === 'mount') t.notOk(isMounted(command[2]), `${command[0]} of ${what} leaves nothing mounted`)
    }
  }
})
