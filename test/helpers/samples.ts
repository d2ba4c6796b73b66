// Generated sample lists for protocol tests: uneven classes, including a
// one-file class, with seeded sizes.
import { SeededRandom } from '../../src/redirect/random'
import type { SampleFile } from '../../src/redirect/layout'

export function makeSamples (seed: number, classSizes: number[], meanSize = 1000, spread = 0.1): SampleFile[] {
  const random = new SeededRandom(seed)
  const files: SampleFile[] = []
  classSizes.forEach((count, c) => {
    const group = `class${String(c).padStart(2, '0')}`
    for (let i = 0; i < count; i++) {
      const jitter = Math.round(meanSize * spread * (random.below(2001) - 1000) / 1000)
      files.push({ path: `${group}/img${String(i).padStart(4, '0')}.jpg`, size: meanSize + jitter, group })
    }
  })
  return files.sort((a, b) => (a.path < b.path ? -1 : 1))
}

export const UNEVEN_CLASSES = [300, 1, 57, 128, 64, 65, 200, 13, 90, 150]
