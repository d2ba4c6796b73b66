/**
 * The ETag of each object of a mounted ImageFolder, kept for the mount's
 * life (every GET is pinned to it: object-dataset.ts), so kept small: an
 * ETag of S3's usual form, the quoted hex MD5 of the object or of its
 * parts (`"<32 hex>"`, `"<32 hex>-<parts>"`), is 16 bytes and a part
 * count in columns, against about 64 bytes as a string in an array (a
 * million objects: 20 MB rather than 64). Any other ETag (a server's own
 * form, an encrypted object's) is kept as it came.
 */

const MD5_FORM = /^"([0-9a-f]{32})(?:-(\d{1,5}))?"$/
/** `parts` of an ETag kept as it came. */
const OTHER = 0xffffffff

export class EtagColumn {
  private digests: Buffer
  /** 0: no ETag set; 1: a single MD5; n + 1: a multipart ETag of n parts; OTHER: in `others`. */
  private parts: Uint32Array
  private readonly others = new Map<number, string>()

  constructor (capacity = 1024) {
    this.digests = Buffer.alloc(16 * capacity)
    this.parts = new Uint32Array(capacity)
  }

  set (entry: number, etag: string): void {
    if (entry >= this.parts.length) this.grow(entry + 1)
    const md5 = MD5_FORM.exec(etag)
    if (md5 === null) {
      this.others.set(entry, etag)
      this.parts[entry] = OTHER
      return
    }
    this.digests.write(md5[1], 16 * entry, 'hex')
    this.parts[entry] = md5[2] === undefined ? 1 : Number(md5[2]) + 1
  }

  /** As the listing gave it; '' for an entry that had none. */
  get (entry: number): string {
    const parts = entry < this.parts.length ? this.parts[entry] : 0
    if (parts === 0) return ''
    if (parts === OTHER) return this.others.get(entry) ?? ''
    const hex = this.digests.toString('hex', 16 * entry, 16 * entry + 16)
    return parts === 1 ? `"${hex}"` : `"${hex}-${parts - 1}"`
  }

  /** The same ETags under new entry numbers: entry `from[i]` here is entry i there. */
  renumbered (from: ArrayLike<number>): EtagColumn {
    const column = new EtagColumn(Math.max(1, from.length))
    for (let i = 0; i < from.length; i++) {
      const entry = from[i]
      if (entry >= this.parts.length) continue
      column.parts[i] = this.parts[entry]
      if (this.parts[entry] === OTHER) column.others.set(i, this.others.get(entry)!)
      else this.digests.copy(column.digests, 16 * i, 16 * entry, 16 * entry + 16)
    }
    return column
  }

  private grow (least: number): void {
    const capacity = Math.max(least, 2 * this.parts.length)
    const digests = Buffer.alloc(16 * capacity)
    this.digests.copy(digests)
    const parts = new Uint32Array(capacity)
    parts.set(this.parts)
    this.digests = digests
    this.parts = parts
  }
}
