/**
 * The one place where errors become errno values for FUSE (negative, as
 * both backends want them).
 */
import { constants } from 'node:os'
import { codeOf, ERRNOS, FsError, type Errno } from '../errors'

const errnos = constants.errno as Record<string, number>
for (const name of ERRNOS) if (errnos[name] === undefined) throw new Error(`this platform has no ${name}`)

export function errno (name: Errno): number {
  return -errnos[name]
}

/** An FsError's errno; a Node or native error's own code where it is one; EIO for anything else. */
export function errnoOf (err: unknown): number {
  if (err instanceof FsError) return errno(err.errno)
  const code = codeOf(err)
  return code !== undefined && errnos[code] !== undefined ? -errnos[code] : errno('EIO')
}
