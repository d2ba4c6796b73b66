import pino, { type Logger } from 'pino'

/** JSON lines to a file, or to stderr when no file is given. */
export function createLogger (level: string, file?: string): Logger {
  return pino({ level, base: { pid: process.pid } }, pino.destination({ dest: file ?? 2, sync: true, mkdir: true }))
}
