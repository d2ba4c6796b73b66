/** Sizes as users write them: 512M, 2G, 1.5GiB, 1048576. Binary units. */
import { UsageError } from '../errors'

const UNITS: Record<string, number> = { '': 1, k: 2 ** 10, m: 2 ** 20, g: 2 ** 30, t: 2 ** 40 }

export function parseSize (text: string, what: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$/i.exec(text)
  if (match === null) throw new UsageError(`${what} must be a size like 512M or 2G, got '${text}'`)
  const bytes = Math.floor(Number(match[1]) * UNITS[match[2].toLowerCase()])
  if (bytes <= 0) throw new UsageError(`${what} must be more than 0, got '${text}'`)
  // Beyond 2^53 bytes a number no longer counts each byte.
  if (!Number.isSafeInteger(bytes)) throw new UsageError(`${what} must be less than 8 PiB, got '${text}'`)
  return bytes
}

export function formatSize (bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let value = bytes
  let unit = 0
  while (Math.abs(value) >= 1024 && unit < units.length - 1) { value /= 1024; unit++ }
  return `${unit === 0 ? Math.round(value) : value.toFixed(1)} ${units[unit]}`
}
