/**
 * A local disk tier for a pack in a bucket (`--cache-dir`, `--cache-size`):
 * whole chunks fetched from the bucket are kept as files on local disk
 * (cloud GPU machines have local NVMe), so later epochs read them there
 * with one aligned O_DIRECT read each, and the bucket only for what the
 * cache cannot hold.
 *
 * - **Whole chunks.** A miss reads the chunk whole (one ranged GET) even
 *   when a `mix` load needs only a block of it: the chunk's other blocks
 *   are then on disk when their loads come, so the bucket still serves each
 *   byte about once, and every cached file is a unit the index checks.
 * - **Never stale.** The cache of a pack is a directory named after a hash
 *   of its index: a remount of the same pack finds it again; a pack written
 *   anew is another directory. Every read from the cache is checked against
 *   the index's CRC-32s, as any chunk read is; a cached chunk that fails is
 *   removed and read from the bucket again.
 * - **Nobody else's.** A cache another user can write would let them feed
 *   the mount forged samples, and a CRC-32 is no defence against a forger.
 *   So, as ssh's StrictModes: the cache root, every directory above it
 *   (a root-owned sticky one, like /tmp, excepted) and everything in it
 *   belong to the mounting user or root and are writable by nobody else,
 *   or the mount is refused in one line; files are opened without
 *   following links and checked once open. And a cached chunk carries an
 *   HMAC-SHA256 under a secret of the cache's own (`key`, 0600), bound to
 *   the pack and the chunk: it is checked, whole, at the chunk's first read
 *   after each mount, and the file's identity (device, inode, change time)
 *   then at every read, so a file changed after its check is checked again.
 *   A keyed hash rather than a digest the cache keeps: the digest would sit
 *   beside the chunks, as open to whoever could forge them; the key is
 *   readable by nobody who could not read the mount's memory anyway.
 * - **Bounded.** The files of one pack's cache stay within `--cache-size`
 *   (lru-cache keeps the order and the sizes): the least recently read go
 *   first, room is made before a chunk is written, and a chunk larger than
 *   the whole cache is not cached. A remount orders what it finds by when
 *   it was written (a read leaves the file as it is: touching its times
 *   would change what its check pins).
 */
import { createHmac, randomBytes, webcrypto } from 'node:crypto'
import { constants, promises as fs, type BigIntStats } from 'node:fs'
import path from 'node:path'
import { LRUCache } from 'lru-cache'
import type { Logger } from 'pino'
import { ChunkFile, type ChunkRead } from '../chunks/native'
import { codeOf, describeSystemError, UsageError } from '../errors'
import { CHUNK_ALIGNMENT } from './format'
import type { Pieces } from './storage'

export interface ChunkCacheStats {
  cacheHits: number
  cacheMisses: number
  cacheBytes: number
  cacheLimitBytes: number
  cacheEvictions: number
  cacheRejected: number
  /** Cached chunks whose HMAC did not hold (damaged, or written by someone else): dropped and read from the bucket. */
  cacheForged: number
}

/** The cache's secret, in its root. */
export const CACHE_KEY_FILE = 'key'
const KEY_BYTES = 32
const MAC_BYTES = 32
/** After a chunk's bytes (padded), one block holds its HMAC. */
const MAC_BLOCK = CHUNK_ALIGNMENT

const padded = (length: number): number => Math.ceil(length / CHUNK_ALIGNMENT) * CHUNK_ALIGNMENT
const fileSize = (chunkLength: number): number => padded(chunkLength) + MAC_BLOCK

interface Held {
  readonly size: number
  /** Being written: room kept, not yet readable. */
  writing: boolean
  /** The file as it was when its HMAC held (this mount): a read of any other is checked again. */
  checked?: { readonly dev: bigint, readonly ino: bigint, readonly ctimeNs: bigint }
}

export class ChunkCache {
  /** Chunk → its file, least recently read first; evicting one removes its file (`removals`). */
  private readonly held: LRUCache<number, Held>
  /** Files being removed: a write waits for them, so the files never exceed the limit. */
  private readonly removals = new Set<Promise<void>>()
  private writingBytes = 0
  private readonly counters = { cacheHits: 0, cacheMisses: 0, cacheEvictions: 0, cacheRejected: 0, cacheForged: 0 }

  private constructor (readonly directory: string, private readonly limitBytes: number, private readonly key: Buffer, private readonly chunkLengths: Float64Array, private readonly log: Logger) {
    this.held = new LRUCache<number, Held>({
      maxSize: limitBytes,
      sizeCalculation: held => held.size,
      dispose: (held, chunk, reason) => {
        if (reason !== 'evict' && reason !== 'delete') return
        if (reason === 'evict') this.counters.cacheEvictions++
        if (held.writing) return // its writer sees it gone and removes its own temporary file
        const removal = fs.rm(this.file(chunk), { force: true }).catch((err: unknown) => {
          this.log.warn({ chunk, err: (err as Error).message }, 'could not remove a chunk from the cache')
        })
        this.removals.add(removal)
        void removal.finally(() => this.removals.delete(removal))
      }
    })
  }

  /**
   * Opens (or makes) the cache of the pack whose index hashes to `identity`
   * (PackIndex.identity), under `root`, and takes stock of what it holds.
   * Refuses, in one line, a cache that someone other than this user (or
   * root) owns or may write.
   */
  static async open (root: string, identity: string, limitBytes: number, chunkLengths: Float64Array, log: Logger): Promise<ChunkCache> {
    const refuse = (why: string): UsageError => new UsageError(`cannot use --cache-dir ${root}: ${why}`)
    const user = process.geteuid?.() ?? 0
    await checkLinksOnTheWay(path.resolve(root), user, refuse)
    await fs.mkdir(root, { recursive: true, mode: 0o700 }).catch((err: unknown) => { throw refuse(describeSystemError(err)) })
    const real = await fs.realpath(root)
    await checkDirectoriesAbove(real, user, refuse)
    await checkPrivate(real, 'directory', user, refuse)
    const key = await cacheKey(real, user, refuse)
    const directory = path.join(real, `pack-${identity.slice(0, 20)}`)
    await fs.mkdir(directory, { mode: 0o700 }).catch((err: unknown) => { if (codeOf(err) !== 'EEXIST') throw refuse(describeSystemError(err)) })
    await checkPrivate(directory, 'directory', user, refuse)
    // Bound to this pack: a chunk copied from another pack's cache does not pass.
    const cache = new ChunkCache(directory, limitBytes, createHmac('sha256', key).update(`redirfs chunk cache\0${identity}`).digest(), chunkLengths, log)
    const found: { chunk: number, size: number, at: number }[] = []
    for (const name of await fs.readdir(directory)) {
      const file = path.join(directory, name)
      const stat = await checkPrivate(file, 'file', user, refuse)
      const match = /^(\d+)\.chunk$/.exec(name)
      const chunk = match === null ? -1 : Number(match[1])
      // Anything that is not a whole chunk of this pack (a write cut short, a stray file) goes.
      if (chunk < 0 || chunk >= chunkLengths.length || Number(stat.size) !== fileSize(chunkLengths[chunk])) {
        await fs.rm(file, { force: true })
        continue
      }
      found.push({ chunk, size: Number(stat.size), at: Number(stat.mtimeMs) })
    }
    // Oldest first, so the most recently read are the last the limit evicts.
    found.sort((a, b) => a.at - b.at)
    for (const { chunk, size } of found) cache.held.set(chunk, { size, writing: false })
    await cache.settled()
    log.info({ directory, chunks: cache.held.size, bytes: cache.held.calculatedSize }, 'chunk cache opened')
    return cache
  }

  private file (chunk: number): string { return path.join(this.directory, `${chunk}.chunk`) }

  /** Whether `chunk` is on disk, whole (not being written). */
  has (chunk: number): boolean { return this.held.peek(chunk)?.writing === false }

  /**
   * Checks a cached chunk's HMAC, once per mount (and again if its file
   * changed since): reads it whole, so it costs a chunk's worth of memory
   * outside --memory while it runs (the caller bounds how many run at
   * once). A chunk that fails is dropped; false then, and it is read from
   * the bucket.
   */
  async check (chunk: number): Promise<boolean> {
    const held = this.held.peek(chunk)
    if (held === undefined || held.writing) return false
    let file: ChunkFile | undefined
    try {
      file = ChunkFile.open(this.file(chunk), { noFollow: true })
      const identity = file.stat()
      if (held.checked !== undefined && sameFile(held.checked, identity)) return true
      const length = this.chunkLengths[chunk]
      const bytes = await file.read(0, padded(length) + MAC_BYTES)
      if (!identity.isFile() || bytes.length !== padded(length) + MAC_BYTES) throw new Error('not a whole cached chunk')
      if (!bytes.subarray(padded(length)).equals(await this.mac(chunk, bytes.subarray(0, length)))) {
        this.counters.cacheForged++
        this.log.warn({ chunk, file: this.file(chunk) }, 'a cached chunk failed its HMAC (damaged, or not written by this cache); reading it from the bucket')
        await this.drop(chunk)
        return false
      }
      held.checked = { dev: identity.dev, ino: identity.ino, ctimeNs: identity.ctimeNs }
      return true
    } catch (err) {
      this.log.warn({ chunk, err: (err as Error).message }, 'a cached chunk could not be checked; reading it from the bucket')
      await this.drop(chunk)
      return false
    } finally {
      file?.close()
    }
  }

  /** Whether `chunk`'s HMAC held in this mount and its file has not changed since (then `readPieces` needs no `check`). */
  checked (chunk: number): boolean { return this.held.peek(chunk)?.checked !== undefined }

  /**
   * Reads a run of a checked chunk (offsets within the chunk) into the
   * targets; undefined when it cannot be read, or its file is not the one
   * checked (then it is dropped).
   */
  async readPieces (chunk: number, offset: number, length: number, pieces: Pieces, targets: Buffer[]): Promise<ChunkRead | undefined> {
    const held = this.held.get(chunk) // most recently read now
    if (held?.checked === undefined) return undefined
    let file: ChunkFile | undefined
    try {
      file = ChunkFile.open(this.file(chunk), { noFollow: true })
      if (!sameFile(held.checked, file.stat())) {
        held.checked = undefined // changed since its check: checked again before it is read
        return undefined
      }
      const read = await file.readPieces(offset, length, pieces, targets)
      this.counters.cacheHits++
      return read
    } catch (err) {
      this.log.warn({ chunk, err: (err as Error).message }, 'a cached chunk could not be read; reading it from the bucket')
      await this.drop(chunk)
      return undefined
    } finally {
      file?.close()
    }
  }

  /** A cached chunk that cannot be served goes (its file with it), and is read from the bucket again. */
  async drop (chunk: number): Promise<void> {
    if (this.held.peek(chunk)?.writing === false) this.held.delete(chunk)
    await this.settled()
  }

  /**
   * Keeps a whole chunk just read from the bucket (checked by the caller),
   * with its HMAC; done when it is on disk. Room is made first, so the
   * files on disk never exceed the limit, those being written included: a
   * chunk larger than the whole cache is not kept.
   */
  async keep (chunk: number, bytes: Buffer): Promise<void> {
    this.counters.cacheMisses++
    if (this.held.has(chunk)) return
    const size = fileSize(bytes.length)
    const placeholder: Held = { size, writing: true }
    this.held.set(chunk, placeholder) // evicts the least recently read to make room
    if (this.held.peek(chunk) !== placeholder) { this.counters.cacheRejected++; return }
    this.writingBytes += size
    const file = this.file(chunk)
    const temporary = `${file}.${randomBytes(4).toString('hex')}.tmp`
    try {
      const mac = await this.mac(chunk, bytes)
      await this.settled()
      // Padded to the alignment O_DIRECT reads need (the file is extended with zeros, the bytes are not copied), the HMAC after.
      const handle = await fs.open(temporary, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600)
      try {
        await handle.write(bytes, 0, bytes.length, 0)
        await handle.write(mac, 0, mac.length, padded(bytes.length))
        await handle.truncate(size)
      } finally {
        await handle.close()
      }
      // Evicted meanwhile (others needed the room): not kept.
      if (this.held.peek(chunk) !== placeholder) throw new Error('no room: other chunks needed it')
      await fs.rename(temporary, file)
      placeholder.writing = false
      // Evicted while it was renamed, when its removal was still its writer's to do.
      if (this.held.peek(chunk) !== placeholder) { await fs.rm(file, { force: true }); return }
      // Written from bytes the caller checked, with the HMAC just made: checked, as it is now.
      const written = await fs.lstat(file, { bigint: true })
      placeholder.checked = { dev: written.dev, ino: written.ino, ctimeNs: written.ctimeNs }
    } catch (err) {
      await fs.rm(temporary, { force: true })
      if (this.held.peek(chunk) === placeholder) this.held.delete(chunk)
      if (/^no room/.test((err as Error).message)) this.counters.cacheRejected++
      else this.log.warn({ chunk, err: (err as Error).message }, 'could not keep a chunk in the cache')
    } finally {
      this.writingBytes -= size
    }
  }

  /** A chunk's HMAC: under the cache's key for this pack, bound to the chunk's number. On the thread pool (WebCrypto). */
  private async mac (chunk: number, bytes: Buffer): Promise<Buffer> {
    const chunkKey = createHmac('sha256', this.key).update(`chunk ${chunk}`).digest()
    const key = await webcrypto.subtle.importKey('raw', chunkKey, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign'])
    return Buffer.from(await webcrypto.subtle.sign('HMAC', key, bytes))
  }

  /** Waits for the files being removed to be gone. */
  private async settled (): Promise<void> {
    while (this.removals.size > 0) await Promise.all([...this.removals])
  }

  stats (): ChunkCacheStats {
    return { ...this.counters, cacheBytes: this.held.calculatedSize - this.writingBytes, cacheLimitBytes: this.limitBytes }
  }
}

function sameFile (checked: NonNullable<Held['checked']>, now: BigIntStats): boolean {
  return now.dev === checked.dev && now.ino === checked.ino && now.ctimeNs === checked.ctimeNs
}

/**
 * `what` at `where` must be one (not a link), belong to `user` or root and
 * be writable by nobody else; gives its attributes.
 */
async function checkPrivate (where: string, what: 'file' | 'directory', user: number, refuse: (why: string) => UsageError): Promise<BigIntStats> {
  const stat = await fs.lstat(where, { bigint: true }).catch((err: unknown) => { throw refuse(describeSystemError(err)) })
  const is = what === 'file' ? stat.isFile() : stat.isDirectory()
  if (!is) throw refuse(`${where} is not a ${what}${stat.isSymbolicLink() ? ' but a symbolic link' : ''}`)
  if (stat.uid !== BigInt(user) && stat.uid !== 0n) throw refuse(`${where} belongs to uid ${stat.uid}, not to this user (uid ${user}) or root`)
  if ((stat.mode & 0o022n) !== 0n) throw refuse(`${where} may be written by ${(stat.mode & 0o002n) !== 0n ? 'anyone' : 'its group'} (mode 0${(stat.mode & 0o7777n).toString(8)}); make it writable by its owner only (chmod go-w)`)
  return stat
}

/**
 * A symbolic link on the given path is followed only when this user or root
 * made it: another's (say /tmp/cache, made before the mount) would choose
 * where this user's cache, and its key, are written.
 */
async function checkLinksOnTheWay (given: string, user: number, refuse: (why: string) => UsageError): Promise<void> {
  for (let at = given; at !== path.dirname(at); at = path.dirname(at)) {
    const stat = await fs.lstat(at, { bigint: true }).catch(() => undefined)
    if (stat?.isSymbolicLink() === true && stat.uid !== BigInt(user) && stat.uid !== 0n) throw refuse(`${at} is a symbolic link of uid ${stat.uid}, not of this user (uid ${user}) or root`)
  }
}

/** Each directory above the cache's: this user's or root's, writable by nobody else unless root's and sticky (/tmp). */
async function checkDirectoriesAbove (real: string, user: number, refuse: (why: string) => UsageError): Promise<void> {
  for (let dir = path.dirname(real); ; dir = path.dirname(dir)) {
    const stat = await fs.stat(dir, { bigint: true })
    const sticky = (stat.mode & 0o1000n) !== 0n && stat.uid === 0n
    if ((stat.uid !== BigInt(user) && stat.uid !== 0n) || ((stat.mode & 0o022n) !== 0n && !sticky)) {
      throw refuse(`${dir}, a directory above it, may be changed by others (uid ${stat.uid}, mode 0${(stat.mode & 0o7777n).toString(8)}), who could put their own cache in its place`)
    }
    if (dir === '/') return
  }
}

/** The cache's secret: made once (0600), and never used when another may read or change it. */
async function cacheKey (root: string, user: number, refuse: (why: string) => UsageError): Promise<Buffer> {
  const file = path.join(root, CACHE_KEY_FILE)
  try {
    const made = await fs.open(file, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600)
    try {
      await made.write(randomBytes(KEY_BYTES))
    } finally {
      await made.close()
    }
  } catch (err) {
    if (codeOf(err) !== 'EEXIST') throw refuse(describeSystemError(err))
  }
  const handle = await fs.open(file, constants.O_RDONLY | constants.O_NOFOLLOW).catch((err: unknown) => {
    throw refuse(codeOf(err) === 'ELOOP' ? `${file} is a symbolic link` : describeSystemError(err))
  })
  try {
    const stat = await handle.stat()
    if (!stat.isFile() || (stat.uid !== user && stat.uid !== 0) || (stat.mode & 0o077) !== 0 || stat.size !== KEY_BYTES) {
      throw refuse(`${file} is not this user's private key of the cache (it must be a ${KEY_BYTES}-byte file of uid ${user} or root, mode 0600); remove it to start the cache afresh`)
    }
    return await handle.readFile()
  } finally {
    await handle.close()
  }
}
