/**
 * A ListObjectsV2 answer's XML, read for what a listing needs: each
 * object's key, size, ETag and time, the common prefixes, and whether and
 * where the listing goes on.
 *
 * The store reads listings with this rather than the SDK's deserializer
 * (store.ts, `listPage`): the SDK parses any XML into a generic tree and
 * then into typed objects, which at ImageNet's scale is most of a mount's
 * CPU and garbage (measured on 100,000 keys: about 60 µs of CPU per key
 * and a heap that grew by 60 MiB, against well under half that here). The
 * answer's shape is S3's documented one, which S3-compatible servers keep:
 * `<Contents>` elements holding `<Key>`, `<LastModified>`, `<ETag>` and
 * `<Size>`, `<CommonPrefixes>` holding `<Prefix>`, and `<IsTruncated>` with
 * `<NextContinuationToken>`. Text is XML-escaped (`&amp;`, `&quot;`, and
 * numeric references for characters XML cannot carry raw); servers send
 * no CDATA. An answer that does not end its `<ListBucketResult>` was cut
 * short: `undefined`, for the store to retry.
 *
 * The store asks for keys URL-encoded (`encoding-type=url`, as S3
 * recommends: XML 1.0 cannot carry every character a key may hold, and
 * XML readers take a raw carriage return for a line feed). An answer that
 * says `<EncodingType>url</EncodingType>` has its keys and prefixes decoded
 * (S3 writes a space as `+`); one that does not (a server that ignores the
 * request) is read as XML text. A key the answer says is URL-encoded and is
 * not cannot be named: the page is refused (`ListingError`), never listed
 * under another name.
 */
import { clip } from '../errors'

export interface ListedObject {
  readonly key: string
  readonly size: number
  /** As the server gives it, quoted. */
  readonly etag: string
  readonly lastModified: Date
}

export interface ListingPage {
  readonly objects: ListedObject[]
  readonly prefixes: string[]
  /** The token for the next page; undefined on the last. */
  readonly next?: string
  readonly truncated: boolean
}

/** A listing that cannot be read as S3 documents it: the store refuses it in one line. */
export class ListingError extends Error {
  override name = 'ListingError'
}

const ESCAPE = /&(?:(amp|lt|gt|quot|apos)|#(\d+)|#x([0-9a-fA-F]+));/g
const NAMED: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" }

/** XML character data as text. */
export function unescapeXml (text: string): string {
  if (!text.includes('&')) return text
  return text.replace(ESCAPE, (_, name: string | undefined, decimal: string | undefined, hex: string | undefined) =>
    name !== undefined ? NAMED[name] : String.fromCodePoint(decimal !== undefined ? Number(decimal) : parseInt(hex!, 16)))
}

/** A key as an answer with `<EncodingType>url</EncodingType>` writes it, decoded: '+' is a space, '%XX' a byte of UTF-8. */
export function decodeListedKey (listed: string): string {
  const spaced = listed.includes('+') ? listed.replace(/\+/g, ' ') : listed
  if (!spaced.includes('%')) return spaced
  try {
    return decodeURIComponent(spaced)
  } catch {
    throw new ListingError(`a key that is not URL-encoded: ${clip(listed)}`)
  }
}

/** Where the first `<name>` element's text lies within [from, to) of `xml`: [start, end), or undefined. */
function element (xml: Buffer, name: string, from = 0, to = xml.length): [number, number] | undefined {
  const open = xml.indexOf(`<${name}>`, from)
  if (open < 0 || open >= to) return undefined
  const start = open + name.length + 2
  const close = xml.indexOf(`</${name}>`, start)
  if (close < 0 || close > to) return undefined
  return [start, close]
}

/**
 * The first `<name>` element's text, unescaped. Decoded from the bytes on
 * its own, so that it holds no reference to the answer (a substring of one
 * large string would keep that string alive as long as any key of it).
 */
function text (xml: Buffer, name: string, from?: number, to?: number): string | undefined {
  const at = element(xml, name, from, to)
  return at === undefined ? undefined : unescapeXml(xml.toString('utf8', at[0], at[1]))
}

/** Each [start, end) of the `<name>` elements of `xml`, in order. */
function * blocks (xml: Buffer, name: string): Generator<[number, number]> {
  const open = `<${name}>`
  const close = `</${name}>`
  for (let at = xml.indexOf(open); at >= 0; at = xml.indexOf(open, at)) {
    const end = xml.indexOf(close, at)
    if (end < 0) return
    yield [at + open.length, end]
    at = end + close.length
  }
}

const END = Buffer.from('</ListBucketResult>')

/**
 * One page of a ListObjectsV2 answer (UTF-8); undefined when the document
 * is cut short or is not a listing. Throws a `ListingError` for a key the
 * answer says is URL-encoded and is not.
 */
export function parseListing (xml: Buffer): ListingPage | undefined {
  let last = xml.length
  while (last > 0 && (xml[last - 1] === 0x0a || xml[last - 1] === 0x0d || xml[last - 1] === 0x20 || xml[last - 1] === 0x09)) last--
  if (last < END.length || !xml.subarray(last - END.length, last).equals(END)) return undefined
  // Its own element, where keys are (URL-encoded, they hold no '<'): no key can be taken for it.
  const encoded = text(xml, 'EncodingType') === 'url'
  const named = (listed: string): string => encoded ? decodeListedKey(listed) : listed
  const objects: ListedObject[] = []
  for (const [start, end] of blocks(xml, 'Contents')) {
    const listed = text(xml, 'Key', start, end)
    if (listed === undefined) continue
    const key = named(listed)
    const size = element(xml, 'Size', start, end)
    const modified = text(xml, 'LastModified', start, end)
    objects.push({
      key,
      size: size === undefined ? 0 : Number(xml.toString('latin1', size[0], size[1])),
      etag: text(xml, 'ETag', start, end) ?? '',
      lastModified: modified === undefined ? new Date(0) : new Date(modified)
    })
  }
  const prefixes: string[] = []
  for (const [start, end] of blocks(xml, 'CommonPrefixes')) {
    const prefix = text(xml, 'Prefix', start, end)
    if (prefix !== undefined) prefixes.push(named(prefix))
  }
  const truncated = text(xml, 'IsTruncated') === 'true'
  return { objects, prefixes, truncated, next: truncated ? text(xml, 'NextContinuationToken') : undefined }
}
