/** Everything a mount is made from, as validated by the CLI. */
import type { RedirectMode } from '../redirect/protocol'

export interface MountConfig {
  source: string
  mountpoint: string
  memoryBytes: number
  chunkSize: number
  /** Whether --chunk-size was given (a pack has its own). */
  chunkSizeGiven: boolean
  mode: RedirectMode
  seed: number
  allowOther: boolean
  includeFile?: string
  extensions?: string[]
  logFile?: string
  logLevel: string
}
