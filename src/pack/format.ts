/**
 * The pack format, version 5. A pack is a directory, or the objects under a
 * bucket prefix, of the same names:
 *
 *   segments/00000.bin, 00001.bin, ...
 *               every physical chunk's files back to back, in layout order,
 *               cut into segments of about `segmentSize` bytes that each
 *               hold whole chunks; each chunk starts on a 4 KiB boundary of
 *               its segment so it can be read with one aligned O_DIRECT
 *               read (or one ranged GET)
 *   others.bin  the non-sample files, so the mounted tree is complete
 *   index.bin   the tree and where everything is, with checksums; written
 *               last, so a pack without one is not a pack (an interrupted
 *               write)
 *
 * index.bin: the magic, a u32 version, a u32 header length and a JSON
 * header; then, each on an 8-byte boundary, typed arrays (entries:
 * size, atime, mtime, ctime (milliseconds), location as f64; mode, uid,
 * gid, crc32, chunk, path end, and the nanoseconds within the second of
 * atime, mtime, ctime as u32; kind as u8; chunks: offset (in its segment) and
 * length as f64, crc32 and segment as u32), then the UTF-8 paths back to
 * back; and last a u32 CRC-32 of every byte before it. A sample's location
 * is its offset in its chunk's segment. Entries are sorted by path, so a directory precedes its
 * children and samples come in the order the layout numbers them.
 *
 * Version 5 adds the shared layout (header `layout: 'shared'`): each chunk a
 * cross-section of the classes (redirect/shared-layout.ts), for many
 * classes on little memory. A pack in the class layout is still written as
 * version 4, which older redirfs reads; a version 5 pack is refused by them
 * as newer, never mounted in the wrong layout.
 *
 * Version 4 cuts the chunks into segments: one huge file is fine for a
 * disk and for S3's ranged GETs, but not for every store (some read the
 * whole object for any range), nor for uploads, retries and caches, which
 * work per object. Version 3 adds the nanoseconds of the times. Version 2 recorded the
 * redirect grouping (`groupDepth`, absent for the default); version 1
 * packs grouped samples by their top-level directory, which mixes classes
 * under a root holding `train/` and `val/`. Older packs are refused with a
 * message to re-pack, never misread.
 */
import { crc32 } from 'node:zlib'
import { clip, UsageError } from '../errors'

export const PACK_MAGIC = Buffer.from('RDXPACK\0', 'latin1')
/** The newest format this redirfs reads and writes (a class-layout pack is written as CLASS_PACK_VERSION). */
export const PACK_VERSION = 5
/** The oldest format it reads: version 4, which knows only the class layout. */
export const CLASS_PACK_VERSION = 4
export const CHUNK_ALIGNMENT = 4096
export const NO_CHUNK = 0xffffffff

/** The layouts a pack's chunks are cut in: one class per chunk (redirect/layout.ts), or many (redirect/shared-layout.ts). */
export type PackLayoutKind = 'class' | 'shared'

/** The format version a pack of this layout is written in: the oldest that says it. */
export const versionFor = (layout: PackLayoutKind): number => layout === 'shared' ? PACK_VERSION : CLASS_PACK_VERSION

export const enum EntryKind { Directory = 0, Sample = 1, Other = 2 }

export interface PackHeader {
  format: 'redirfs-pack'
  version: number
  chunkSize: number
  seed: number
  entries: number
  samples: number
  chunks: number
  pathBytes: number
  sampleBytes: number
  createdAt: string
  /** `--group-depth` it was written with; absent: the directory holding each sample (grouping.ts). */
  groupDepth?: number
  /** How its chunks are cut (version 5): 'shared', each a cross-section of the classes; absent (version 4): each of one class. */
  layout?: PackLayoutKind
  /** A shard of a `--nodes` pack: the cluster size and which node's home chunks it holds. */
  nodes?: number
  node?: number
  /** How many segment files hold the chunks, and the size they were cut at (`--segment-size`). */
  segments: number
  segmentSize: number
}

export interface PackArrays {
  size: Float64Array
  atimeMs: Float64Array
  mtimeMs: Float64Array
  ctimeMs: Float64Array
  /** Byte offset in chunks.bin (samples) or others.bin (other files). */
  location: Float64Array
  mode: Uint32Array
  uid: Uint32Array
  gid: Uint32Array
  crc: Uint32Array
  chunk: Uint32Array
  pathEnd: Uint32Array
  atimeNsec: Uint32Array
  mtimeNsec: Uint32Array
  ctimeNsec: Uint32Array
  kind: Uint8Array
  chunkOffset: Float64Array
  chunkLength: Float64Array
  chunkCrc: Uint32Array
  /** The segment each chunk is in. */
  chunkSegment: Uint32Array
}

const ENTRY_F64 = ['size', 'atimeMs', 'mtimeMs', 'ctimeMs', 'location'] as const
const ENTRY_U32 = ['mode', 'uid', 'gid', 'crc', 'chunk', 'pathEnd', 'atimeNsec', 'mtimeNsec', 'ctimeNsec'] as const

export function allocateArrays (entries: number, chunks: number): PackArrays {
  const arrays: Record<string, unknown> = {}
  for (const name of ENTRY_F64) arrays[name] = new Float64Array(entries)
  for (const name of ENTRY_U32) arrays[name] = new Uint32Array(entries)
  arrays.kind = new Uint8Array(entries)
  arrays.chunkOffset = new Float64Array(chunks)
  arrays.chunkLength = new Float64Array(chunks)
  arrays.chunkCrc = new Uint32Array(chunks)
  arrays.chunkSegment = new Uint32Array(chunks)
  return arrays as unknown as PackArrays
}

function sections (a: PackArrays): ArrayBufferView[] {
  return [...ENTRY_F64.map(n => a[n]), a.chunkOffset, a.chunkLength, ...ENTRY_U32.map(n => a[n]), a.chunkCrc, a.chunkSegment, a.kind]
}

const pad8 = (n: number): number => (8 - (n % 8)) % 8

export function encodeIndex (header: PackHeader, arrays: PackArrays, paths: Buffer): Buffer {
  const json = Buffer.from(JSON.stringify(header))
  const parts: Buffer[] = [PACK_MAGIC, u32(header.version), u32(json.length), json]
  let length = PACK_MAGIC.length + 8 + json.length
  const align = (): void => { const p = pad8(length); if (p > 0) { parts.push(Buffer.alloc(p)); length += p } }
  align()
  for (const section of sections(arrays)) {
    parts.push(Buffer.from(section.buffer, section.byteOffset, section.byteLength))
    length += section.byteLength
    align()
  }
  parts.push(paths)
  const body = Buffer.concat(parts)
  return Buffer.concat([body, u32(crc32(body))])
}

export interface DecodedIndex { header: PackHeader, arrays: PackArrays, paths: Buffer }

/** The largest index this redirfs reads: a Buffer's limit (an index of 13 million files is about 1.6 GB). */
export const MAX_INDEX_BYTES = 2 ** 32 - 1
/** A header is a few hundred bytes of JSON; anything near this is not one. */
const MAX_HEADER_BYTES = 1 << 20

/**
 * Decodes an index and checks it whole before anything trusts it (a crafted
 * one must never reach a read with an offset outside its chunk): one line
 * naming the first inconsistency, never a crash or an allocation the
 * header's counts made up.
 */
export function decodeIndex (bytes: Buffer, file: string): DecodedIndex {
  const bad = (why: string): UsageError => new UsageError(`${file} is not a valid redirfs pack index: ${why}`)
  if (bytes.length < PACK_MAGIC.length + 12 || !bytes.subarray(0, PACK_MAGIC.length).equals(PACK_MAGIC)) throw bad('wrong magic')
  const version = bytes.readUInt32LE(PACK_MAGIC.length)
  if (version < CLASS_PACK_VERSION) {
    const why = version === 1
      ? 'whose redirect groups were top-level directories and could mix classes'
      : version === 2 ? 'which keeps times to the microsecond only' : 'which keeps every chunk in one chunks.bin, not in segments'
    throw new UsageError(`${file} was written by an older redirfs (pack format ${version}, ${why}); re-pack the dataset: redirfs pack <source> <out>`)
  }
  if (version > PACK_VERSION) throw bad(`format version ${version}, this redirfs reads version ${PACK_VERSION}; use a newer redirfs`)
  const body = bytes.subarray(0, bytes.length - 4)
  if (crc32(body) !== bytes.readUInt32LE(bytes.length - 4)) throw bad('index checksum mismatch (damaged or incomplete)')
  // Typed-array views need 8-byte aligned memory; a large readFile buffer
  // starts its own allocation, so a copy is only needed for a small one.
  const aligned = body.byteOffset % 8 === 0 ? body : Buffer.from(new Uint8Array(body))
  const jsonLength = aligned.readUInt32LE(PACK_MAGIC.length + 4)
  let position = PACK_MAGIC.length + 8
  if (jsonLength > MAX_HEADER_BYTES || position + jsonLength > aligned.length) throw bad(`its header claims ${jsonLength} bytes, more than the index holds`)
  const header = parseHeader(aligned.toString('utf8', position, position + jsonLength), version, bad)
  position += jsonLength
  position += pad8(position)
  // Every section's size follows from the header's counts: check they add up before making a view of any.
  const expected = position + sectionBytes(header.entries, header.chunks) + header.pathBytes
  if (expected !== aligned.length) throw bad(`section sizes do not add up (the header's counts need ${expected} bytes, the index has ${aligned.length})`)
  const arrays = allocateArrays(0, 0) as unknown as Record<string, ArrayBufferView>
  const take = <T extends ArrayBufferView>(make: (buffer: ArrayBuffer, offset: number, count: number) => T, count: number, bytesPer: number): T => {
    const view = make(aligned.buffer as ArrayBuffer, aligned.byteOffset + position, count)
    position += count * bytesPer
    position += pad8(position)
    return view
  }
  const f64 = (b: ArrayBuffer, o: number, c: number): Float64Array => new Float64Array(b, o, c)
  const u32v = (b: ArrayBuffer, o: number, c: number): Uint32Array => new Uint32Array(b, o, c)
  const u8 = (b: ArrayBuffer, o: number, c: number): Uint8Array => new Uint8Array(b, o, c)
  for (const name of ENTRY_F64) arrays[name] = take(f64, header.entries, 8)
  arrays.chunkOffset = take(f64, header.chunks, 8)
  arrays.chunkLength = take(f64, header.chunks, 8)
  for (const name of ENTRY_U32) arrays[name] = take(u32v, header.entries, 4)
  arrays.chunkCrc = take(u32v, header.chunks, 4)
  arrays.chunkSegment = take(u32v, header.chunks, 4)
  arrays.kind = take(u8, header.entries, 1)
  const decoded = { header, arrays: arrays as unknown as PackArrays, paths: aligned.subarray(position) }
  const problem = inconsistency(decoded)
  if (problem !== undefined) throw bad(problem)
  return decoded
}

/** The bytes of the typed-array sections for these counts, each padded to 8 bytes. */
function sectionBytes (entries: number, chunks: number): number {
  const padded = (n: number): number => n + pad8(n)
  return ENTRY_F64.length * padded(entries * 8) + 2 * padded(chunks * 8) + ENTRY_U32.length * padded(entries * 4) + 2 * padded(chunks * 4) + padded(entries)
}

/** The header's JSON, each field of the type and range the format allows. */
function parseHeader (json: string, version: number, bad: (why: string) => UsageError): PackHeader {
  let parsed: unknown
  try {
    parsed = JSON.parse(json)
  } catch {
    throw bad('its header is not JSON')
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw bad('its header is not a JSON object')
  const header = parsed as Record<string, unknown>
  if (header.format !== 'redirfs-pack') throw bad('unknown format')
  if (header.version !== version) throw bad(`its header says format version ${String(header.version)}, its first bytes ${version}`)
  const count = (name: string, least: number, most: number, optional = false): void => {
    const value = header[name]
    if (optional && value === undefined) return
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < least || value > most) throw bad(`its header's ${name} is ${clip(JSON.stringify(value) ?? 'missing')}, not a whole number from ${least} to ${most}`)
  }
  const entries = 2 ** 32 - 1
  count('entries', 1, entries)
  count('samples', 0, header.entries as number)
  count('chunkSize', 1, 2 ** 20)
  count('chunks', 0, header.samples as number)
  count('segments', 0, header.chunks as number)
  count('pathBytes', 0, MAX_INDEX_BYTES)
  count('sampleBytes', 0, Number.MAX_SAFE_INTEGER)
  count('segmentSize', 1, Number.MAX_SAFE_INTEGER)
  count('seed', Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER)
  count('groupDepth', 1, 2 ** 16, true)
  count('nodes', 2, 2 ** 16, true)
  if (header.nodes !== undefined) count('node', 0, (header.nodes as number) - 1)
  else if (header.node !== undefined) throw bad('its header names a node but no node count')
  if (typeof header.createdAt !== 'string') throw bad('its header has no createdAt')
  if (version === CLASS_PACK_VERSION ? header.layout !== undefined : header.layout !== 'class' && header.layout !== 'shared') {
    throw bad(`its header's layout is ${clip(JSON.stringify(header.layout) ?? 'missing')}, which format version ${version} does not have`)
  }
  // The shared layout is built for one node: no pack of it is cut into shards.
  if (header.layout === 'shared' && header.nodes !== undefined) throw bad('its header names a shard of a cluster, which the shared layout has none of')
  return header as unknown as PackHeader
}

const S_IFMT = 0o170000
const S_IFDIR = 0o040000
const S_IFREG = 0o100000

/**
 * The first way in which the index contradicts itself, or undefined: what a
 * reader relies on, checked in one pass over each section. Kinds are known
 * and match the modes; paths are spelled out by increasing ends, in strictly
 * increasing order (so no two are one), of clean components, the root
 * first; every sample lies inside its chunk and every chunk's files fill it
 * exactly; chunks are aligned, inside their segment, in order and disjoint;
 * non-sample files lie back to back in others.bin; counts match the header;
 * times are within a Date's range (what the FUSE server and fuse-native
 * hold), and a shard's chunks of other nodes have length 0 exactly.
 */
function inconsistency ({ header, arrays: a, paths }: DecodedIndex): string | undefined {
  // A shard holds its node's chunks; another node's have length 0 exactly (what the pack source and verify skip), any other length is checked.
  const held = (c: number): boolean => header.nodes === undefined || a.chunkLength[c] !== 0
  let previous = ''
  let samples = 0
  let sampleBytes = 0
  let others = 0
  const filled = new Float64Array(header.chunks)
  const files = new Uint32Array(header.chunks)
  for (let i = 0; i < header.entries; i++) {
    const start = i === 0 ? 0 : a.pathEnd[i - 1]
    if (a.pathEnd[i] < start || a.pathEnd[i] > header.pathBytes || (i > 0 && a.pathEnd[i] === start)) return `entry ${i}'s path ends at ${a.pathEnd[i]}, out of order`
    const path = paths.toString('utf8', start, a.pathEnd[i])
    const name = (): string => clip(JSON.stringify(path))
    if (i === 0 ? path !== '' : !(path > previous)) return i === 0 ? 'its first entry is not the root' : `entry ${name()} is out of order or repeated`
    if (i > 0 && path.split('/').some(part => part === '' || part === '.' || part === '..' || part.includes('\0'))) return `entry ${name()} is not a clean relative path`
    previous = path
    const kind = a.kind[i]
    const type = a.mode[i] & S_IFMT
    if (kind === EntryKind.Directory ? type !== S_IFDIR : (kind !== EntryKind.Sample && kind !== EntryKind.Other) || type !== S_IFREG) return `entry ${name()} has kind ${kind} and mode 0${a.mode[i].toString(8)}, which do not go together`
    if ((a.mode[i] & ~(S_IFMT | 0o7777)) !== 0) return `entry ${name()} has mode 0${a.mode[i].toString(8)}`
    if (i === 0 && kind !== EntryKind.Directory) return 'its root is not a directory'
    if (a.atimeNsec[i] >= 1e9 || a.mtimeNsec[i] >= 1e9 || a.ctimeNsec[i] >= 1e9 || !isTime(a.atimeMs[i]) || !isTime(a.mtimeMs[i]) || !isTime(a.ctimeMs[i])) return `entry ${name()} has times that are not times`
    const size = a.size[i]
    if (!Number.isSafeInteger(size) || size < 0) return `entry ${name()} has size ${size}`
    if (kind !== EntryKind.Sample) {
      if (a.chunk[i] !== NO_CHUNK) return `entry ${name()} is not a sample but names chunk ${a.chunk[i]}`
      if (kind === EntryKind.Other) {
        if (a.location[i] !== others) return `file ${name()} is not where it belongs in others.bin (at ${a.location[i]}, not ${others})`
        others += size
      }
      continue
    }
    samples++
    sampleBytes += size
    const c = a.chunk[i]
    if (c >= header.chunks) return `sample ${name()} names chunk ${c}, of ${header.chunks}`
    if (!held(c)) continue
    const location = a.location[i]
    if (!Number.isSafeInteger(location) || location < a.chunkOffset[c] || location + size > a.chunkOffset[c] + a.chunkLength[c]) {
      return `sample ${name()} (${size} bytes at ${location}) is not inside its chunk ${c} (${a.chunkLength[c]} bytes at ${a.chunkOffset[c]})`
    }
    filled[c] += size
    files[c]++
  }
  if (samples !== header.samples) return `it has ${samples} samples, its header says ${header.samples}`
  if (sampleBytes !== header.sampleBytes) return `its samples hold ${sampleBytes} bytes, its header says ${header.sampleBytes}`
  let last = -1
  for (let c = 0; c < header.chunks; c++) {
    const [offset, length, segment] = [a.chunkOffset[c], a.chunkLength[c], a.chunkSegment[c]]
    if (files[c] > header.chunkSize) return `chunk ${c} has ${files[c]} files, more than the chunk size ${header.chunkSize}`
    if (!held(c)) continue
    if (!Number.isSafeInteger(length) || length < 0) return `chunk ${c} has length ${length}`
    if (!Number.isSafeInteger(offset) || offset < 0 || offset % CHUNK_ALIGNMENT !== 0) return `chunk ${c} is at ${offset}, not on a ${CHUNK_ALIGNMENT}-byte boundary of its segment`
    if (files[c] === 0 || filled[c] !== length) return `chunk ${c} is ${length} bytes, its ${files[c]} files hold ${filled[c]}`
    if (segment >= header.segments) return `chunk ${c} is in segment ${segment}, of ${header.segments}`
    if (offset > 0 && offset + length > header.segmentSize) return `chunk ${c} ends at ${offset + length}, past its segment's size ${header.segmentSize}`
    if (last >= 0) {
      const [lastEnd, lastSegment] = [a.chunkOffset[last] + a.chunkLength[last], a.chunkSegment[last]]
      if (segment < lastSegment || (segment === lastSegment && offset < lastEnd)) return `chunk ${c} overlaps or precedes chunk ${last} in segment ${segment}`
    }
    last = c
  }
  return undefined
}

/** A time in milliseconds that a Date holds (±100,000,000 days), and so a timespec and fuse-native. */
const isTime = (ms: number): boolean => Math.abs(ms) <= 8.64e15

function u32 (value: number): Buffer {
  const b = Buffer.alloc(4)
  b.writeUInt32LE(value >>> 0)
  return b
}
