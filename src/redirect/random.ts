/**
 * Seeded randomness for the protocol.
 *
 * Everything the layout decides must be reproducible from the seed alone,
 * because every node of a cluster computes the same layout and compares a
 * hash of it. Runtime choices (refill ties, pool picks) also draw from a
 * seeded generator so that a simulator run can be replayed exactly.
 */
import prand from 'pure-rand'

export class SeededRandom {
  private readonly generator: prand.RandomGenerator

  constructor (seed: number) {
    this.generator = prand.xoroshiro128plus(seed)
  }

  /** A uniform integer in [0, bound). */
  below (bound: number): number {
    if (bound <= 1) return 0
    return prand.unsafeUniformIntDistribution(0, bound - 1, this.generator)
  }

  /** Fisher–Yates, in place. */
  shuffle<T> (items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.below(i + 1)
      const held = items[i]
      items[i] = items[j]
      items[j] = held
    }
    return items
  }
}
