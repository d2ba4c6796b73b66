/**
 * `redirfs pack ... s3://bucket/prefix`: the pack's files uploaded as
 * objects while they are written (each a multipart upload of a few parts
 * in memory at a time), the index last, so that a prefix is a pack only
 * once it is complete; a failed pack removes what it uploaded (one killed
 * outright leaves objects but no index, which nothing mounts).
 */
import type { OutputFile, PackOutput } from '../pack/output'
import { INDEX_FILE } from '../pack/storage'
import { UsageError } from '../errors'
import { s3Url, type S3Location } from './location'
import type { ObjectStore } from './store'

export class BucketOutput implements PackOutput {
  readonly where: string

  constructor (private readonly store: ObjectStore, private readonly location: S3Location, private readonly shard = false) {
    this.where = s3Url(location.bucket, location.prefix).replace(/\/$/, '')
  }

  async begin (_options: { private: boolean }): Promise<void> {
    if (this.location.prefix === '') throw new UsageError(`give the pack a prefix of its own in the bucket, e.g. ${this.where}/my-dataset.pack`)
    if (await this.store.any(this.location.prefix)) throw new UsageError(`${this.where} already holds objects; remove them or choose another prefix`)
  }

  async inside (name: string): Promise<PackOutput> {
    return new BucketOutput(this.store, { bucket: this.location.bucket, prefix: `${this.location.prefix}${name}/` }, true)
  }

  async create (name: string): Promise<OutputFile> {
    const writer = this.store.createObjectWriter(this.location.prefix + name)
    return {
      write: async bytes => await writer.write(bytes).catch(async (err: unknown) => { await writer.abort().catch(() => {}); throw err }),
      close: async () => { await writer.close() }
    }
  }

  async writeIndex (bytes: Buffer): Promise<void> {
    await this.store.put(this.location.prefix + INDEX_FILE, bytes)
  }

  async commit (): Promise<void> {}

  async abort (): Promise<void> {
    if (!this.shard) await this.store.deletePrefix(this.location.prefix)
  }
}
