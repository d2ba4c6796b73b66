/**
 * The order S3 lists keys in: by their UTF-8 bytes.
 *
 * Listings of one prefix arrive in that order, but a tree listed as many
 * prefixes in parallel has to be put back together, and JavaScript's own
 * string order (UTF-16 code units) differs from it for characters outside
 * the Basic Multilingual Plane: a surrogate pair (U+D800-U+DFFF) sorts
 * below U+E000-U+FFFF in UTF-16 and above them in UTF-8. Comparing code
 * units with that one range moved gives the byte order without encoding
 * every key.
 */

/** Negative, zero or positive as `a`'s UTF-8 bytes sort before, equal or after `b`'s. */
export function compareKeys (a: string, b: string): number {
  const shorter = Math.min(a.length, b.length)
  for (let i = 0; i < shorter; i++) {
    const x = a.charCodeAt(i)
    const y = b.charCodeAt(i)
    if (x !== y) return utf8Rank(x) - utf8Rank(y)
  }
  return a.length - b.length
}

/** A code unit's place in UTF-8 order: surrogates after U+E000-U+FFFF, those just below them. */
function utf8Rank (unit: number): number {
  if (unit < 0xD800) return unit
  return unit >= 0xE000 ? unit - 0x800 : unit + 0x2000
}

/** Sorts in place by key bytes, skipping the sort when the list is already in order (as one listing is). */
export function sortByKey<T extends { readonly key: string }> (items: T[]): T[] {
  for (let i = 1; i < items.length; i++) {
    if (compareKeys(items[i - 1].key, items[i].key) > 0) return items.sort((p, q) => compareKeys(p.key, q.key))
  }
  return items
}
