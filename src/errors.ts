/**
 * One error type for everything a user can cause or meet: it carries the
 * message the CLI prints (one line, no stack) and, where it reaches the
 * filesystem, the errno the FUSE layer answers with.
 */
export class RedirfsError extends Error {
  constructor (message: string, readonly errno: string = 'EIO') {
    super(message)
    this.name = 'RedirfsError'
  }
}
