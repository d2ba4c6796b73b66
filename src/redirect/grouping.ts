/**
 * Redirect groups: which samples may stand in for one another.
 *
 * ImageFolder labels a sample by the first directory under whatever root
 * the trainer passed it, and that root may be the mount root, `train/`
 * below it, or deeper. The one grouping that is right for every such root
 * is the directory that directly holds the sample: two files of one
 * directory share their class at any root (docs/design.md, "Label
 * safety"). A class whose files sit in sub-directories is split into
 * finer groups, each still one class.
 *
 * `--group-depth N` coarsens this for users who know their tree: a
 * sample's group is the first N components of its directory (a file
 * shallower than that keeps its own directory). Set too shallow (above the
 * class level, e.g. 1 for a root holding `train/` and `val/`), it mixes
 * classes and hands trainers wrong labels; the mount's output shows the
 * groups so that a user can see it.
 */

/** undefined: the directory that holds the sample (the default). */
export type GroupDepth = number | undefined

/** The group of a sample at `relativePath` ('/'-separated, under the mount root). */
export function groupOf (relativePath: string, depth: GroupDepth): string {
  const slash = relativePath.lastIndexOf('/')
  const directory = slash < 0 ? '' : relativePath.slice(0, slash)
  if (depth === undefined || directory === '') return directory
  let end = -1
  for (let level = 0; level < depth; level++) {
    end = directory.indexOf('/', end + 1)
    if (end < 0) return directory
  }
  return directory.slice(0, end)
}

/** How a grouping is named in messages, stats and the layout hash. */
export function describeGrouping (depth: GroupDepth): string {
  return depth === undefined ? 'the directory holding each sample' : `the first ${depth} director${depth === 1 ? 'y' : 'ies'} of each sample's path`
}

/** A few group names spread over the sorted list, so that a user sees what the groups are (e.g. train/n01 … val/n09). */
export function sampleOfGroups (sortedGroups: readonly string[], count = 4): string[] {
  if (sortedGroups.length <= count) return [...sortedGroups]
  const picked = new Set<number>()
  for (let i = 0; i < count; i++) picked.add(count === 1 ? 0 : Math.round(i * (sortedGroups.length - 1) / (count - 1)))
  return [...picked].map(i => sortedGroups[i])
}
