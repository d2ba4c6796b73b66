/**
 * The one place where errors become errno values for FUSE. fuse-native
 * wants them negative.
 */
import { constants } from 'node:os'
import { RedirfsError } from '../errors'

const errnos = constants.errno as Record<string, number>

export function errno (name: string): number {
  return -(errnos[name] ?? errnos.EIO)
}

export function errnoOf (err: unknown): number {
  if (err instanceof RedirfsError) return errno(err.errno)
  const code = (err as NodeJS.ErrnoException | undefined)?.code
  return errno(code !== undefined && code in errnos ? code : 'EIO')
}
