// A generated ImageFolder with the shapes that break naive filesystems:
// uneven classes (one with a single file), nested directories inside a
// class, names with spaces and non-ASCII characters, non-sample files and
// a zero-byte image. Every sample's content is unique, so a table maps
// what a reader got back to the file and class it came from.
import { createHash } from 'node:crypto'
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { SeededRandom } from '../../src/redirect/random'

export interface GeneratedDataset {
  readonly root: string
  /** Relative path of every sample. */
  readonly samples: string[]
  /** sha1 of content → relative path of the sample that has it. */
  readonly byContent: Map<string, string>
  /** Relative path → exact bytes of every non-sample file. */
  readonly others: Map<string, Buffer>
}

export const CLASS_SIZES: Record<string, number> = {
  ant: 23,
  bee: 1,
  cat: 40,
  dog: 17,
  eel: 31,
  fox: 9,
  gnu: 26,
  hen: 12,
  ibis: 35,
  jay: 19,
  'k lass with space': 14,
  'löwe 猫': 11
}

export const sha1 = (bytes: Buffer): string => createHash('sha1').update(bytes).digest('hex')
export const classOf = (relative: string): string => relative.slice(0, relative.indexOf('/'))

/** The class directory of a sample of a `splits` dataset: train/<class> or val/<class>. */
export const splitClassOf = (relative: string): string => relative.split('/').slice(0, 2).join('/')

/** `splits`: the classes under train/ and again under val/, as ImageNet copies are laid out. */
export function generateDataset (seed = 1, options: { splits?: boolean } = {}): GeneratedDataset {
  const root = mkdtempSync(path.join(os.tmpdir(), 'redirfs-ds-'))
  const random = new SeededRandom(seed)
  const samples: string[] = []
  const byContent = new Map<string, string>()
  const others = new Map<string, Buffer>()
  const write = (relative: string, bytes: Buffer): void => {
    mkdirSync(path.dirname(path.join(root, relative)), { recursive: true })
    writeFileSync(path.join(root, relative), bytes)
  }
  const classes = Object.entries(CLASS_SIZES).flatMap(([name, count]) =>
    options.splits === true ? [[`train/${name}`, count], [`val/${name}`, Math.ceil(count / 3)]] as const : [[name, count]] as const)
  for (const [name, count] of classes) {
    for (let i = 0; i < count; i++) {
      // Some files sit in nested sub-directories of their class.
      const sub = i % 5 === 3 ? 'nested/deeper/' : i % 7 === 2 ? 'sub dir/' : ''
      const ext = ['.jpg', '.JPEG', '.png'][i % 3]
      const relative = `${name}/${sub}img ${String(i).padStart(3, '0')}${i % 4 === 0 ? ' é' : ''}${ext}`
      const size = 200 + random.below(3000)
      const bytes = Buffer.alloc(size)
      for (let b = 0; b < size; b++) bytes[b] = random.below(256)
      Buffer.from(`${relative}\n`).copy(bytes, 0)
      write(relative, bytes)
      samples.push(relative)
      byContent.set(sha1(bytes), relative)
    }
  }
  const other = (relative: string, text: string): void => { const bytes = Buffer.from(text); write(relative, bytes); others.set(relative, bytes) }
  other('README.txt', 'a generated dataset\n')
  other('cat/labels.csv', 'id,label\n1,cat\n')
  other('dog/notes/about dog.txt', 'dogs are samples of class dog\n')
  other('fox/empty.jpg', '')
  return { root, samples: samples.sort(), byContent, others }
}
