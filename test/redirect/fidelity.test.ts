import t from 'tap'
import { planMemory } from '../../src/redirect/budget'
import { measureFidelity, orderKept } from '../../src/redirect/fidelity'
import { buildLayout } from '../../src/redirect/layout'
import { simulate, type ServedOpen } from '../../src/redirect/simulator'
import { SeededRandom } from '../../src/redirect/random'
import { fileId } from '../helpers/ids'
import { syntheticSamples } from '../../src/cli/simulate-command'

const samples = syntheticSamples(20_000, 20, 1000, 1)
const memoryBytes = samples.reduce((sum, s) => sum + s.size, 0) / 4
const layout = buildLayout(samples, { chunkSize: 16, seed: 1, vcCount: planMemory(samples, 16, memoryBytes).vcCount })

t.test('off serves the trainer\'s own uniform shuffle: no more same-chunk pairs than uniform, and pairs change company as in a uniform shuffle', async t => {
  const figures = measureFidelity(layout, simulate(layout, { mode: 'off', memoryBytes, epochs: 3, seed: 2, readers: 8 }), 256)
  // Fewer than uniform: off reads a chunk several times an epoch, and files of two reads are not counted as one read's.
  t.ok(figures.sameChunkRatio < 1.15, `same-chunk ratio ${figures.sameChunkRatio}`)
  t.ok(figures.repeatedPairsRatio > 0.85 && figures.repeatedPairsRatio < 1.15, `repeated-pairs ratio ${figures.repeatedPairsRatio}`)
  t.ok(Math.abs(figures.orderKept) < 0.05, `order kept from the epoch before: ${figures.orderKept.toFixed(3)}`)
})

t.test('order kept from the epoch before: 0 for fresh shuffles, 1 for the same order every epoch, -1 for it reversed', async t => {
  const served = (order: readonly number[]): ServedOpen[] => order.map(file => ({ opened: fileId(file), exact: false, served: fileId(file), read: undefined }))
  const random = new SeededRandom(3)
  const files = [...Array(5000).keys()]
  const shuffles = [0, 1, 2, 3].map(() => served(random.shuffle([...files])))
  t.ok(Math.abs(orderKept(shuffles, files.length)) < 0.03, `fresh shuffles: ${orderKept(shuffles, files.length).toFixed(3)}`)
  t.equal(orderKept([shuffles[0], shuffles[0], shuffles[0]], files.length), 1)
  t.equal(orderKept([served(files), served([...files].reverse())], files.length), -1)
  t.ok(Number.isNaN(orderKept([shuffles[0]], files.length)), 'one epoch: nothing to compare')
})

t.test('mix reads every chunk once, yet serves samples stored together together no more than a uniform shuffle does, and changes their company every epoch', async t => {
  const mix = measureFidelity(layout, simulate(layout, { mode: 'mix', memoryBytes, epochs: 3, seed: 2, readers: 8 }), 256)
  const pool = measureFidelity(layout, simulate(layout, { mode: 'pool', memoryBytes, epochs: 3, seed: 2, readers: 8 }), 256)
  t.equal(mix.readAmplification, 1)
  t.ok(pool.sameChunkRatio > 3, `pool: ${pool.sameChunkRatio.toFixed(2)}x a uniform shuffle's same-chunk pairs`)
  t.ok(mix.sameChunkRatio < 1.3, `mix: ${mix.sameChunkRatio.toFixed(2)}x`)
  t.ok(mix.repeatedPairsRatio < 1.15 && mix.repeatedPairsRatio < pool.repeatedPairsRatio, `pairs repeated across epochs: mix ${mix.repeatedPairsRatio.toFixed(2)}x, pool ${pool.repeatedPairsRatio.toFixed(2)}x of uniform`)
})

t.test('mix over blocks (as a pack reads) sits between pool and a uniform shuffle', async t => {
  const blocks = measureFidelity(layout, simulate(layout, { mode: 'mix', memoryBytes, epochs: 3, seed: 2, readers: 8, mixBlock: 4 }), 256)
  const pool = measureFidelity(layout, simulate(layout, { mode: 'pool', memoryBytes, epochs: 3, seed: 2, readers: 8 }), 256)
  t.equal(blocks.readAmplification, 1)
  t.ok(blocks.sameChunkRatio > 1 && blocks.sameChunkRatio < pool.sameChunkRatio / 2, `blocks of 4 of 16: ${blocks.sameChunkRatio.toFixed(2)}x, pool ${pool.sameChunkRatio.toFixed(2)}x`)
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

t.test('with half the dataset in memory (two chunks per VC), reading across an epoch\'s end does not make epochs repeat each other\'s batches', async t => {
  const halfMemory = memoryBytes * 2
  const halfLayout = buildLayout(samples, { chunkSize: 16, seed: 1, vcCount: planMemory(samples, 16, halfMemory).vcCount })
  for (const [name, mixBlock] of [['pool', undefined], ['mix', undefined], ['mix', 4]] as const) {
    const figures = measureFidelity(halfLayout, simulate(halfLayout, { mode: name, memoryBytes: halfMemory, epochs: 3, seed: 2, readers: 8, mixBlock }), 256)
    t.ok(figures.repeatedPairsRatio < 1.15, `${name}${mixBlock === undefined ? '' : ` blocks of ${mixBlock}`}: pairs repeated from the epoch before ${figures.repeatedPairsRatio.toFixed(2)}x of uniform`)
  }
})
