import t from 'tap'
import { planMemory } from '../../src/redirect/budget'
import type { SampleFile } from '../../src/redirect/layout'

t.test('the least memory planMemory names gives every group a virtual chunk, and a byte less does not', async t => {
  // Found by the model test (seed 505): at the minimum, memory / bytes per VC rounded to a hair below the group
  // count (here 5675 / 810.71... = 6.99...), and the layout had a group with no VC.
  const files: SampleFile[] = [64, 64, 64, 64, 64, 64, 70].map((size, i) => ({ path: `c${i}/f.jpg`, size, group: `c${i}` }))
  const { minimumBytes } = planMemory(files, 10, 0)
  t.equal(minimumBytes, 5675)
  t.equal(planMemory(files, 10, minimumBytes).vcCount, 7)
  t.equal(planMemory(files, 10, minimumBytes - 1).vcCount, 6)
})
