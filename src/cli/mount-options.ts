/**
 * `redirfs mount -o <list>`: options as mount(8) and /etc/fstab write them
 * (`memory=32G,chunk_size=64,allow_other`), for mount(8)'s helper
 * (mount-scripts/mount.fuse.redirfs). Each becomes the flag of `redirfs
 * mount` it names, checked against that command's own options, so the
 * list never drifts from the CLI: `name=value` is `--name=value`
 * (underscores for dashes), a bare name a flag. A value that holds a
 * comma is written in double quotes (`extensions="jpg,png"`), as mount(8)
 * itself reads option lists; mount(8)'s own options are left to it.
 */
import type { Command } from 'commander'
import { UsageError } from '../errors'

/** Options mount(8) acts on itself (or that describe the mount to it), passed on to helpers: not redirfs's. */
const MOUNT8_OPTIONS = new Set(['defaults', 'auto', 'noauto', 'nofail', 'user', 'nouser', 'users', 'owner', 'group', 'exec', 'noexec',
  'suid', 'nosuid', 'dev', 'nodev', 'sync', 'async', 'atime', 'noatime', 'relatime', 'norelatime', 'strictatime', 'nostrictatime',
  'diratime', 'nodiratime', 'lazytime', 'nolazytime', 'ro', 'rw', '_netdev', 'comment', 'fsname', 'subtype'])

/** Splits an option list at the commas outside double quotes; a value wholly in double quotes loses them. */
export function splitOptionList (list: string): Array<{ name: string, value?: string }> {
  const parts: string[] = []
  let part = ''
  let quoted = false
  for (const char of list) {
    if (char === '"') quoted = !quoted
    if (char === ',' && !quoted) {
      parts.push(part)
      part = ''
    } else {
      part += char
    }
  }
  if (quoted) throw new UsageError(`-o ${list}: a double quote is not closed`)
  parts.push(part)
  return parts.filter(p => p !== '').map(p => {
    const equals = p.indexOf('=')
    if (equals < 0) return { name: p }
    const value = p.slice(equals + 1)
    return { name: p.slice(0, equals), value: /^".*"$/s.test(value) ? value.slice(1, -1) : value }
  })
}

/** The flags of `command` an option list stands for, each one argument (`--memory=32G`), so no value can be read as a flag. */
export function flagsOfOptionList (command: Command, list: string): string[] {
  const flags: string[] = []
  for (const { name, value } of splitOptionList(list)) {
    if (MOUNT8_OPTIONS.has(name) || name.startsWith('x-')) continue
    const long = /^[a-z0-9][a-z0-9_-]*$/.test(name) ? `--${name.replace(/_/g, '-')}` : undefined
    const option = command.options.find(o => o.long === long && !o.hidden)
    if (option === undefined) {
      throw new UsageError(`-o ${name}${value !== undefined ? '=…' : ''}: redirfs ${command.name()} has no such option (names are those of redirfs ${command.name()} --help, underscores for dashes)`)
    }
    // mount(8) waits for its helper, which must return once the mount is up.
    if (option.long === '--foreground') throw new UsageError(`-o ${name}: a mount by mount(8) runs in the background (leave ${name} out)`)
    const bare = option.isBoolean() || option.negate
    if (bare && value !== undefined) throw new UsageError(`-o ${name}: takes no value (give it bare, as ${name})`)
    if (!bare && value === undefined) throw new UsageError(`-o ${name}: needs a value (${name}=…)`)
    flags.push(value === undefined ? option.long! : `${option.long!}=${value}`)
  }
  return flags
}

/**
 * `argv` with each `-o <list>` (or `-o<list>`) of `redirfs <command>`,
 * before a `--`, replaced by the flags it stands for.
 */
export function expandOptionLists (argv: readonly string[], command: Command): string[] {
  if (argv[2] !== command.name()) return [...argv]
  const out = argv.slice(0, 3)
  for (let i = 3; i < argv.length; i++) {
    const arg = argv[i]
    if (arg === '--') {
      out.push(...argv.slice(i))
      break
    }
    if (arg === '-o' || (arg.startsWith('-o') && !arg.startsWith('--'))) {
      const list = arg === '-o' ? argv[++i] : arg.slice(2)
      if (list === undefined) throw new UsageError('-o needs a list of options, e.g. -o memory=32G,chunk_size=64')
      out.push(...flagsOfOptionList(command, list))
    } else {
      out.push(arg)
    }
  }
  return out
}
