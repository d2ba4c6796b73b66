/** What /proc/mounts says about a path. */
import { promises as fs } from 'node:fs'

export interface MountRecord { readonly source: string, readonly target: string, readonly type: string }

// /proc/mounts escapes space, tab, newline and backslash as octal.
const unescape = (field: string): string => field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)))

export async function readMounts (): Promise<MountRecord[]> {
  const text = await fs.readFile('/proc/mounts', 'utf8')
  return text.split('\n').filter(Boolean).map(line => {
    const [source, target, type] = line.split(' ')
    return { source: unescape(source), target: unescape(target), type }
  })
}

/** The newest mount at `target`, if any. */
export async function mountAt (target: string): Promise<MountRecord | undefined> {
  return (await readMounts()).filter(m => m.target === target).pop()
}
