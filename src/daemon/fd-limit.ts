/**
 * The daemon's file descriptor limit (RLIMIT_NOFILE). Node raises the soft
 * limit to the hard one itself when it starts (node.cc, PlatformInit), so
 * the daemon already has all the descriptors it may have, with no setrlimit
 * of ours; test/daemon/fd-limit.test.ts keeps that true. What it reads
 * here sizes what the metrics server may hold (src/metrics/prometheus.ts),
 * and goes in the log.
 */
import { readFileSync } from 'node:fs'

export interface FdLimit { soft: number, hard: number }

/** This process's limit, from /proc/self/limits; undefined if unreadable, Infinity for "unlimited". */
export function fdLimit (): FdLimit | undefined {
  let text: string
  try { text = readFileSync('/proc/self/limits', 'utf8') } catch { return undefined }
  const match = /^Max open files\s+(\S+)\s+(\S+)/m.exec(text)
  if (match === null) return undefined
  const value = (field: string): number => field === 'unlimited' ? Infinity : Number(field)
  return { soft: value(match[1]), hard: value(match[2]) }
}
