/**
 * Open file handles. A sample's handle is bound at open to the bytes the
 * protocol chose and keeps them until release; the size of the newest
 * binding of a path is what getattr reports for that path meanwhile, so
 * `fstat` and `lseek(SEEK_END)` on the handle see the bytes it reads.
 */
import type { OpenFile } from '../chunks/tree'

export type Handle =
  | { readonly kind: 'bytes', readonly path: string, readonly bytes: Buffer }
  | { readonly kind: 'passthrough', readonly path: string, readonly file: OpenFile }

export class HandleTable {
  private readonly handles = new Map<number, Handle>()
  /** path → handle numbers bound to it, oldest first. */
  private readonly boundByPath = new Map<string, number[]>()
  private nextNumber = 1
  boundBytes = 0

  add (handle: Handle): number {
    const number = this.nextNumber++
    if (this.nextNumber > 0x7fffffff) this.nextNumber = 1
    this.handles.set(number, handle)
    if (handle.kind === 'bytes') {
      this.boundByPath.set(handle.path, [...(this.boundByPath.get(handle.path) ?? []), number])
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
      const remaining = (this.boundByPath.get(handle.path) ?? []).filter(n => n !== number)
      if (remaining.length === 0) this.boundByPath.delete(handle.path)
      else this.boundByPath.set(handle.path, remaining)
      this.boundBytes -= handle.bytes.length
    }
    return handle
  }

  /** The size of the newest binding of `path`, if it has one. */
  boundSize (path: string): number | undefined {
    const numbers = this.boundByPath.get(path)
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
