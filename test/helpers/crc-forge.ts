// What an attacker does to a file checked only by its CRC-32: change 4 of
// its bytes so that the CRC comes out as they wish (CRC-32 is linear, so
// any 4 consecutive bytes can be solved for). Used to show that a check a
// local user can forge is no check.
import { crc32 } from 'node:zlib'

const POLY = 0xedb88320
const table = new Uint32Array(256)
for (let i = 0; i < 256; i++) {
  let c = i
  for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ POLY : c >>> 1
  table[i] = c >>> 0
}
/** The table index whose entry has each top byte (unique for CRC-32's table). */
const byTopByte = new Uint8Array(256)
table.forEach((entry, i) => { byTopByte[entry >>> 24] = i })

const step = (register: number, byte: number): number => (table[(register ^ byte) & 0xff] ^ (register >>> 8)) >>> 0

/** Rewrites bytes[at .. at + 4) so that crc32(bytes) === target. */
export function forgeCrc (bytes: Buffer, at: number, target: number): void {
  let register = 0xffffffff
  for (let i = 0; i < at; i++) register = step(register, bytes[i])
  // Backwards from the final register through the bytes after the patch.
  let after = (target ^ 0xffffffff) >>> 0
  for (let i = bytes.length - 1; i >= at + 4; i--) {
    const index = byTopByte[after >>> 24]
    after = ((((after ^ table[index]) << 8) >>> 0) | ((index ^ bytes[i]) & 0xff)) >>> 0
  }
  // The four table indices that lead to that register, then the bytes that pick them.
  const indices: number[] = []
  let c = after
  for (let k = 0; k < 4; k++) {
    const index = byTopByte[c >>> 24]
    indices.unshift(index)
    c = ((c ^ table[index]) << 8) >>> 0
  }
  for (let k = 0; k < 4; k++) {
    bytes[at + k] = (register ^ indices[k]) & 0xff
    register = step(register, bytes[at + k])
  }
  if (crc32(bytes) !== target) throw new Error('forgeCrc: the forged CRC does not come out')
}
