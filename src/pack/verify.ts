/**
 * `redirfs verify`: checks every chunk and every file of a pack against
 * its checksums and says what is wrong, by chunk and by file.
 */
import { promises as fs } from 'node:fs'
import path from 'node:path'
import { crc32 } from 'node:zlib'
import { ChunkFile } from '../chunks/native'
import { groupOf } from '../redirect/grouping'
import { EntryKind } from './format'
import { CHUNKS_FILE, loadPackIndex, OTHERS_FILE } from './pack-index'

export interface VerifyReport {
  chunks: number
  files: number
  problems: string[]
}

export async function verifyPack (directory: string, onProgress?: (done: number, total: number) => void): Promise<VerifyReport> {
  const pack = await loadPackIndex(directory)
  const { arrays, header } = pack
  const problems: string[] = []
  const filesOfChunk: number[][] = Array.from({ length: header.chunks }, () => [])
  for (let i = 0; i < header.entries; i++) if (arrays.kind[i] === EntryKind.Sample) filesOfChunk[arrays.chunk[i]].push(i)

  const chunkFile = ChunkFile.open(path.join(directory, CHUNKS_FILE))
  let done = 0
  try {
    for (let c = 0; c < header.chunks; c++) {
      const length = arrays.chunkLength[c]
      // A shard holds only its node's chunks; the others have length 0.
      if (header.nodes !== undefined && length === 0) continue
      const bytes = await chunkFile.read(arrays.chunkOffset[c], length)
      const group = groupOf(pack.path(filesOfChunk[c][0]), header.groupDepth)
      const damaged = filesOfChunk[c].filter(entry => {
        const start = arrays.location[entry] - arrays.chunkOffset[c]
        const end = start + arrays.size[entry]
        return end > bytes.length || crc32(bytes.subarray(start, end)) !== arrays.crc[entry]
      }).map(entry => pack.path(entry))
      if (bytes.length < length) {
        problems.push(`chunk ${c} (group ${group}): truncated, ${bytes.length} of ${length} bytes present; files cut off: ${damaged.join(', ')}`)
      } else if (crc32(bytes) !== arrays.chunkCrc[c] || damaged.length > 0) {
        problems.push(`chunk ${c} (group ${group}): checksum mismatch in ${damaged.length > 0 ? damaged.join(', ') : 'the chunk (no single file)'}`)
      }
      done += length
      onProgress?.(done, header.sampleBytes)
    }
  } finally {
    chunkFile.close()
  }

  const others = await fs.readFile(path.join(directory, OTHERS_FILE)).catch(() => Buffer.alloc(0))
  let files = 0
  for (let i = 0; i < header.entries; i++) {
    if (arrays.kind[i] === EntryKind.Directory) continue
    files++
    if (arrays.kind[i] !== EntryKind.Other) continue
    const start = arrays.location[i]
    const end = start + arrays.size[i]
    if (end > others.length || crc32(others.subarray(start, end)) !== arrays.crc[i]) problems.push(`${pack.path(i)}: damaged (non-sample file)`)
  }
  return { chunks: header.chunks, files, problems }
}
