import pino, { type Logger } from 'pino'

/** JSON lines to a file (a path, or a descriptor already open), or to stderr when none is given. */
export function createLogger (level: string, file?: string | number): Logger {
  return pino({ level, base: { pid: process.pid } }, pino.destination({ dest: file ?? 2, sync: true, mkdir: typeof file === 'string' }))
}
