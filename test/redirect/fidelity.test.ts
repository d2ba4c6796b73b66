import t from 'tap'
import { planMemory } from '../../src/redirect/budget'
import { measureFidelity } from '../../src/redirect/fidelity'
import { buildLayout } from '../../src/redirect/layout'
import { simulate } from '../../src/redirect/simulator'
import { syntheticSamples } from '../../src/cli/simulate-command'

const samples = syntheticSamples(20_000, 20, 1000, 1)
const memoryBytes = samples.reduce((sum, s) => sum + s.size, 0) / 4
const layout = buildLayout(samples, { chunkSize: 16, seed: 1, vcCount: planMemory(samples, 16, memoryBytes).vcCount })

t.test('off serves the trainer\'s own uniform shuffle, so its batches mix chunks like a uniform shuffle (ratio ≈ 1)', async t => {
  const figures = measureFidelity(layout, simulate(layout, { mode: 'off', memoryBytes, epochs: 3, seed: 2, readers: 8 }), 256)
  t.ok(figures.sameChunkRatio > 0.85 && figures.sameChunkRatio < 1.15, `ratio ${figures.sameChunkRatio}`)
})

t.test('pool reads every chunk once per epoch with read amplification 1', async t => {
  const figures = measureFidelity(layout, simulate(layout, { mode: 'pool', memoryBytes, epochs: 3, seed: 2, readers: 8 }), 256)
  t.equal(figures.chunkLoadsPerPcPerEpoch, 1)
  t.equal(figures.readAmplification, 1)
  t.equal(figures.wastedBytesPerEpoch, 0)
})

t.test('strict trades extra chunk reads for batches closer to a uniform shuffle than pool', async t => {
  const strict = measureFidelity(layout, simulate(layout, { mode: 'strict', memoryBytes, epochs: 3, seed: 2, readers: 8 }), 256)
  const pool = measureFidelity(layout, simulate(layout, { mode: 'pool', memoryBytes, epochs: 3, seed: 2, readers: 8 }), 256)
  t.ok(strict.readAmplification > 1, `strict read amplification ${strict.readAmplification}`)
  t.ok(strict.sameChunkRatio < pool.sameChunkRatio, `strict ${strict.sameChunkRatio} < pool ${pool.sameChunkRatio}`)
})
