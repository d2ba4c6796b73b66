/**
 * `redirfs verify`: checks every chunk and every file of a pack against
 * its checksums and says what is wrong, by chunk and by file. A pack in a
 * bucket is read as the mount reads it, a ranged GET per chunk. First, what
 * a mount checks of the index itself: a pack verify calls intact mounts.
 */
import { crc32 } from 'node:zlib'
import { groupOf } from '../redirect/grouping'
import { EntryKind } from './format'
import { checkPackLayout, loadPackIndex, packLayout } from './pack-index'
import { segmentName, type PackStorage } from './storage'

export interface VerifyReport {
  chunks: number
  files: number
  problems: string[]
}

export async function verifyPack (where: string | PackStorage, onProgress?: (done: number, total: number) => void): Promise<VerifyReport> {
  const pack = await loadPackIndex(where)
  const { arrays, header } = pack
  const problems: string[] = []
  const filesOfChunk: number[][] = Array.from({ length: header.chunks }, () => [])
  for (let i = 0; i < header.entries; i++) if (arrays.kind[i] === EntryKind.Sample) filesOfChunk[arrays.chunk[i]].push(i)

  let done = 0
  try {
    checkPackLayout(pack, packLayout(pack))
    for (let c = 0; c < header.chunks; c++) {
      const length = arrays.chunkLength[c]
      // A shard holds only its node's chunks; the others have length 0.
      if (header.nodes !== undefined && length === 0) continue
      const segment = arrays.chunkSegment[c]
      const bytes = await pack.storage.readSegment(segment, arrays.chunkOffset[c], length).catch((err: unknown) => {
        problems.push(`chunk ${c}: cannot read ${segmentName(segment)}: ${(err as Error).message}`)
        return undefined
      })
      done += length
      onProgress?.(done, header.sampleBytes)
      if (bytes === undefined) continue
      // A chunk of the class layout holds one group; one of the shared layout, many.
      const groups = new Set(filesOfChunk[c].map(entry => groupOf(pack.path(entry), header.groupDepth)))
      const group = groups.size === 1 ? `group ${[...groups][0]}` : `${groups.size} groups`
      const damaged = filesOfChunk[c].filter(entry => {
        const start = arrays.location[entry] - arrays.chunkOffset[c]
        const end = start + arrays.size[entry]
        return end > bytes.length || crc32(bytes.subarray(start, end)) !== arrays.crc[entry]
      }).map(entry => pack.path(entry))
      if (bytes.length < length) {
        problems.push(`chunk ${c} (${group}, ${segmentName(segment)}): truncated, ${bytes.length} of ${length} bytes present; files cut off: ${damaged.join(', ')}`)
      } else if (crc32(bytes) !== arrays.chunkCrc[c] || damaged.length > 0) {
        problems.push(`chunk ${c} (${group}, ${segmentName(segment)}): checksum mismatch in ${damaged.length > 0 ? damaged.join(', ') : 'the chunk (no single file)'}`)
      }
    }

    let files = 0
    for (let i = 0; i < header.entries; i++) {
      if (arrays.kind[i] === EntryKind.Directory) continue
      files++
      if (arrays.kind[i] !== EntryKind.Other) continue
      const bytes = await pack.storage.readOthers(arrays.location[i], arrays.size[i]).catch(() => Buffer.alloc(0))
      if (bytes.length !== arrays.size[i] || crc32(bytes) !== arrays.crc[i]) problems.push(`${pack.path(i)}: damaged (non-sample file)`)
    }
    return { chunks: header.chunks, files, problems }
  } finally {
    await pack.storage.close()
  }
}
