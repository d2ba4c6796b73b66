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
export const ERRNOS = ['EIO', 'ENOENT', 'ENOTDIR', 'EISDIR', 'EROFS', 'EBADF'] as const
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
