/**
 * Open file handles. A sample's handle is bound at open to the bytes the
 * protocol chose and keeps them until release; the size of the newest
 * binding of a path is what getattr reports for that path meanwhile, so
 * `fstat` and `lseek(SEEK_END)` on the handle see the bytes it reads.
 * Handles name what was opened by tree entry, not path: an open should
 * not have to spell a path it never uses.
 */
import type { OpenFile } from '../chunks/tree'
import type { FileId } from '../redirect/layout'

/** The `entry` of a handle on a control file, which is not in the tree. */
export const STATS_ENTRY = -1
export const RESET_ENTRY = -2

export type Handle =
  | { readonly kind: 'bytes', readonly entry: number, readonly bytes: Buffer, /** The sample these bytes are (a sample's handle). */ readonly served?: FileId }
  | { readonly kind: 'passthrough', readonly entry: number, readonly file: OpenFile }

export class HandleTable {
  private readonly handles = new Map<number, Handle>()
  /** tree entry → handle numbers bound to it, oldest first. */
  private readonly boundByEntry = new Map<number, number[]>()
  private nextNumber = 1
  boundBytes = 0

  add (handle: Handle): number {
    const number = this.nextNumber++
    if (this.nextNumber > 0x7fffffff) this.nextNumber = 1
    this.handles.set(number, handle)
    if (handle.kind === 'bytes') {
      const numbers = this.boundByEntry.get(handle.entry)
      if (numbers === undefined) this.boundByEntry.set(handle.entry, [number])
      else numbers.push(number)
      this.boundBytes += handle.bytes.length
    }
    return number
  }

  get (number: number): Handle | undefined { return this.handles.get(number) }

  remove (number: number): Handle | undefined {
    const handle = this.handles.get(number)
    if (handle === undefined) return undefined
    this.handles.delete(number)
    if (handle.kind === 'bytes') {
      const numbers = this.boundByEntry.get(handle.entry) ?? []
      numbers.splice(numbers.indexOf(number), 1)
      if (numbers.length === 0) this.boundByEntry.delete(handle.entry)
      this.boundBytes -= handle.bytes.length
    }
    return handle
  }

  /** The size of the newest binding of a tree entry (or STATS_ENTRY), if it has one. */
  boundSize (entry: number): number | undefined {
    const numbers = this.boundByEntry.get(entry)
    if (numbers === undefined) return undefined
    const handle = this.handles.get(numbers[numbers.length - 1])
    return handle?.kind === 'bytes' ? handle.bytes.length : undefined
  }

  get size (): number { return this.handles.size }

  async closeAll (): Promise<void> {
    for (const number of [...this.handles.keys()]) {
      const handle = this.remove(number)
      if (handle?.kind === 'passthrough') await handle.file.close().catch(() => {})
    }
  }
}
