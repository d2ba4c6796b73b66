/**
 * The pack format, version 4. A pack is a directory, or the objects under a
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
import { UsageError } from '../errors'

export const PACK_MAGIC = Buffer.from('RDXPACK\0', 'latin1')
export const PACK_VERSION = 4
export const CHUNK_ALIGNMENT = 4096
export const NO_CHUNK = 0xffffffff

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

export function decodeIndex (bytes: Buffer, file: string): DecodedIndex {
  const bad = (why: string): UsageError => new UsageError(`${file} is not a valid redirfs pack index: ${why}`)
  if (bytes.length < PACK_MAGIC.length + 12 || !bytes.subarray(0, PACK_MAGIC.length).equals(PACK_MAGIC)) throw bad('wrong magic')
  const version = bytes.readUInt32LE(PACK_MAGIC.length)
  if (version < PACK_VERSION) {
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
  const header = JSON.parse(aligned.toString('utf8', position, position + jsonLength)) as PackHeader
  if (header.format !== 'redirfs-pack') throw bad('unknown format')
  position += jsonLength
  position += pad8(position)
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
  if (position + header.pathBytes !== aligned.length) throw bad('section sizes do not add up')
  return { header, arrays: arrays as unknown as PackArrays, paths: aligned.subarray(position) }
}

function u32 (value: number): Buffer {
  const b = Buffer.alloc(4)
  b.writeUInt32LE(value >>> 0)
  return b
}
