/**
 * The errors a user meets, in two kinds (docs/design.md, "Errors"):
 *
 * - `UsageError`: what was asked cannot be done as asked (a bad flag, a
 *   missing source, too little memory, a damaged pack index). The CLI
 *   prints its one-line message, which says the fix, and exits 1. It
 *   never reaches the filesystem.
 * - `FsError`: an operation on the mount fails. It carries the errno the
 *   FUSE layer answers with and, as `cause`, the error it came from.
 *
 * Anything else that reaches the CLI is a bug, and is reported as one.
 */

/** The errno values redirfs answers with; `errno()` in src/fs turns them into numbers. */
export const ERRNOS = ['EIO', 'ENOENT', 'ENOTDIR', 'EISDIR', 'EROFS', 'EBADF', 'EACCES', 'EPERM', 'EMFILE'] as const
export type Errno = typeof ERRNOS[number]

export class UsageError extends Error {
  constructor (message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'UsageError'
  }
}

export class FsError extends Error {
  constructor (readonly errno: Errno, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'FsError'
  }
}

/** Whether an error's message is written for the user (as opposed to a bug's). */
export function isForUser (err: unknown): err is UsageError | FsError {
  return err instanceof UsageError || err instanceof FsError
}

/** A native or Node error's code (`ENOENT`, …), if it has one. */
export function codeOf (err: unknown): string | undefined {
  const code = (err as { code?: unknown } | undefined)?.code
  return typeof code === 'string' ? code : undefined
}

/** What the system errors a user can meet mean, in words. */
const SYSTEM_ERRORS: Record<string, string> = {
  ENOSPC: 'no space left on the device',
  EDQUOT: 'disk quota exceeded',
  EROFS: 'a read-only filesystem',
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  ENOTDIR: 'not a directory',
  EISDIR: 'is a directory',
  ENOENT: 'no such file or directory',
  EEXIST: 'already exists',
  EMFILE: 'too many open files',
  ENFILE: 'too many open files on the system',
  EIO: 'an I/O error',
  ENOTCONN: 'a dead mount (transport endpoint is not connected)',
  ELOOP: 'too many symbolic links',
  ENAMETOOLONG: 'name too long',
  EBUSY: 'busy',
  ENOMEM: 'out of memory'
}

/** A system error (one with a code) as the user should read it: "no space left on the device (ENOSPC)". */
export function describeSystemError (err: unknown): string {
  const code = codeOf(err)
  if (code === undefined) return (err as Error).message
  return `${SYSTEM_ERRORS[code] ?? (err as Error).message.replace(/^[A-Z]+: /, '').split(',')[0]} (${code})`
}

/**
 * A system error that reached the CLI with nothing more said about it: one
 * line naming what was being done and to what, never "unexpected error".
 */
export function systemErrorMessage (err: unknown): string | undefined {
  const code = codeOf(err)
  if (code === undefined || !/^E[A-Z]+$/.test(code)) return undefined
  const { syscall, path } = err as { syscall?: string, path?: string }
  const doing = syscall !== undefined ? `${syscall}${path !== undefined ? ` ${path}` : ''}` : (path ?? 'the operation')
  return `cannot ${doing}: ${describeSystemError(err)}`
}

/**
 * Text for a user's terminal, on one line: control characters (line breaks,
 * escape sequences a terminal would act on) and the Unicode line separators
 * written as \uXXXX. Paths, keys and names are the user's or a store's, and
 * may hold any of them.
 */
export function printable (text: string): string {
  // eslint-disable-next-line no-control-regex -- control characters are what it looks for
  return text.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, c => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}

/** A value from outside (a path, a key, a line of a list) in a message: printable, and cut short past `most` characters, never kilobytes of it. */
export function clip (text: string, most = 120): string {
  const shown = printable(text)
  return shown.length > most ? `${shown.slice(0, most - 3)}...` : shown
}
