/**
 * The fuzzers' randomness: every value a case uses is drawn from one
 * seeded generator, so a case is reproduced from its seed alone.
 */
import prand from 'pure-rand'

/** Numbers that break arithmetic on offsets, sizes and counts. */
export const AWKWARD_NUMBERS: readonly number[] = [
  0, -0, 1, -1, 2, 0.5, -0.5, 4095, 4096, 4097, -4096, -8192, 255, 256, 65535, 65536,
  2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1, 2 ** 32, 2 ** 53 - 1, 2 ** 53, 2 ** 53 + 2, -(2 ** 53), 2 ** 64, 1e12, 1e300, -1e300,
  Number.MIN_VALUE, Number.EPSILON, Number.NaN, Infinity, -Infinity
]

/** Strings that break parsers, paths and one-line messages. */
export const AWKWARD_STRINGS: readonly string[] = [
  '', ' ', '\n', '\r\n', '\t', '\0', '.', '..', '/', '//', '../..', './x', 'a/../b', '-', '--', '-1', '0', '1e999', 'NaN', 'null', 'true', '[]', '{}', '{"a":',
  '\u2028', '\u202e', '\ud800', '\uffff', 'é', '猫', '\x1b[31m', '%s', '$(id)', '`id`', 'a'.repeat(300), ' padded ', 'x\ny', '\\', '"', "'"
]

export class Draw {
  private readonly generator: prand.RandomGenerator

  constructor (readonly seed: number) {
    this.generator = prand.xoroshiro128plus(seed)
  }

  /** A whole number in [low, high]. */
  int (low: number, high: number): number {
    return prand.unsafeUniformIntDistribution(low, high, this.generator)
  }

  /** A whole number in [0, bound). */
  below (bound: number): number {
    return bound <= 1 ? 0 : this.int(0, bound - 1)
  }

  /** True with probability `p`. */
  chance (p: number): boolean {
    return this.int(0, 999_999) < p * 1_000_000
  }

  pick<T> (items: readonly T[]): T {
    return items[this.below(items.length)]
  }

  /** A random uint32, as the 4 bytes of a field could hold. */
  u32 (): number {
    return this.int(0, 0xffff) * 0x10000 + this.int(0, 0xffff)
  }

  bytes (length: number): Buffer {
    const out = Buffer.alloc(length)
    for (let i = 0; i < length; i++) out[i] = this.int(0, 255)
    return out
  }

  /** Characters of a kind: printable ASCII, names' characters, anything UTF-16 holds (lone surrogates too). */
  text (length: number, kind: 'ascii' | 'name' | 'any' = 'ascii'): string {
    let out = ''
    for (let i = 0; i < length; i++) {
      if (kind === 'ascii') out += String.fromCharCode(this.int(0x20, 0x7e))
      else if (kind === 'name') out += this.pick(['a', 'b', 'z', '0', '9', '_', '-', ' ', '.', 'é', '猫', 'A', '/'])
      else out += this.chance(0.7) ? String.fromCharCode(this.int(0, 0x7f)) : String.fromCharCode(this.int(0, 0xffff))
    }
    return out
  }

  /** A number near `value`, or an awkward one. */
  numberNear (value: number): number {
    switch (this.below(6)) {
      case 0: return value + this.pick([-1, 1, -2, 2])
      case 1: return value + this.pick([-4096, 4096, -8192])
      case 2: return value * this.pick([2, 0.5, -1])
      case 3: return this.u32()
      default: return this.pick(AWKWARD_NUMBERS)
    }
  }

  /** Up to `most` distinct indexes of [0, count), sorted. */
  subset (count: number, most: number): number[] {
    const chosen = new Set<number>()
    const wanted = this.int(1, Math.max(1, Math.min(most, count)))
    while (chosen.size < wanted && chosen.size < count) chosen.add(this.below(count))
    return [...chosen].sort((a, b) => a - b)
  }
}
