// `redirfs simulate --nodes`: the cluster protocol over a synthetic dataset,
// through the real CLI: every epoch exact, and prefetch saving requests.
import t from 'tap'
import { redirfs } from '../helpers/mount'

t.test('simulate --nodes 3: every epoch exact; prefetch means fewer requests per remote sample', async t => {
  const result = await redirfs('simulate', '--nodes', '3', '--files', '3000', '--classes', '10', '--chunk-sizes', '16', '--memory', '0.25', '--modes', 'strict,pool,mix', '--epochs', '2', '--json')
  t.equal(result.code, 0, result.stderr)
  const rows = JSON.parse(result.stdout) as { mode: string, prefetch: boolean, exactEpochs: number, epochs: number, requestsPerRemoteSample: number, remoteShare: number }[]
  t.equal(rows.length, 6)
  for (const row of rows) t.equal(row.exactEpochs, row.epochs, `${row.mode}, prefetch ${row.prefetch}: every epoch exact`)
  for (const mode of ['strict', 'pool', 'mix']) {
    const on = rows.find(r => r.mode === mode && r.prefetch)!
    const off = rows.find(r => r.mode === mode && !r.prefetch)!
    t.equal(off.requestsPerRemoteSample, 1, `${mode}: one request per remote sample without prefetch`)
    t.ok(on.requestsPerRemoteSample < 1, `${mode}: fewer with prefetch (${on.requestsPerRemoteSample.toFixed(2)})`)
    t.ok(on.remoteShare > 0.6 && on.remoteShare < 0.72, 'about two thirds of the samples are remote on 3 nodes')
  }
})

t.test('simulate --nodes with too little memory says why', async t => {
  const result = await redirfs('simulate', '--nodes', '3', '--files', '3000', '--classes', '50', '--chunk-sizes', '64', '--memory', '0.05')
  t.not(result.code, 0)
  t.match(result.stderr, /per node is too small for chunk size 64/)
})

t.test('simulate prints, per mode, read amplification and how far batches are from a uniform shuffle', async t => {
  const result = await redirfs('simulate', '--layouts', 'class', '--files', '4000', '--classes', '8', '--chunk-sizes', '16', '--memory', '0.25', '--epochs', '3', '--batch-size', '64', '--json')
  t.equal(result.code, 0, result.stderr)
  const rows = JSON.parse(result.stdout) as { mode: string, readAmplification: number, sameChunkRatio: number, repeatedPairsRatio: number }[]
  t.same(rows.map(r => r.mode), ['strict', 'pool', 'mix'], 'the default modes')
  const [strict, pool, mix] = rows
  t.ok(strict.readAmplification > 1, 'strict reads chunks more than once')
  t.equal(pool.readAmplification, 1)
  t.equal(mix.readAmplification, 1)
  t.ok(mix.sameChunkRatio < pool.sameChunkRatio, `same-chunk pairs vs uniform: mix ${mix.sameChunkRatio.toFixed(2)}x < pool ${pool.sameChunkRatio.toFixed(2)}x`)
  const table = await redirfs('simulate', '--layouts', 'class', '--files', '4000', '--classes', '8', '--chunk-sizes', '16', '--memory', '0.25', '--epochs', '2')
  t.match(table.stdout, /\| class \| mix \| 16 \| 1 \| 25% \| [0-9.]+% \| 1\.00 \| 1\.00 \|/)
  t.match(table.stdout, /pairs repeated from the epoch before/)
})

t.test('simulate with many classes: the class layout is refused with the memory it needs; the shared layout serves', async t => {
  const result = await redirfs('simulate', '--files', '20000', '--classes', '400', '--chunk-sizes', '64', '--mix-block', '16', '--memory', '0.1', '--epochs', '2', '--json')
  t.equal(result.code, 0, result.stderr)
  const rows = JSON.parse(result.stdout) as { layout: string, mode: string, refused?: string, blockSize: number, waitedShare: number, readAmplification: number, repeatedPairsRatio: number }[]
  t.same(rows.map(r => `${r.layout}/${r.mode}`), ['class/strict', 'class/pool', 'class/mix', 'shared/shared'], 'both layouts, the class one in every mode')
  for (const row of rows.slice(0, 3)) t.match(row.refused, /every class needs a chunk of its files in memory: at least 122% of the dataset/)
  const shared = rows[3]
  t.equal(shared.blockSize, 16)
  t.ok(shared.waitedShare < 0.05, `few opens wait: ${shared.waitedShare}`)
  t.ok(shared.readAmplification < 1.1, `each file read about once per epoch: ${shared.readAmplification}`)
  t.ok(shared.repeatedPairsRatio < 1.1, `batches keep company about as a uniform shuffle's: ${shared.repeatedPairsRatio}`)
  const table = await redirfs('simulate', '--files', '20000', '--classes', '400', '--chunk-sizes', '64', '--mix-block', '16', '--memory', '0.1', '--epochs', '2')
  t.match(table.stdout, /\| class \| pool \| 64 \| 64 \| 10% \| refused: every class needs a chunk of its files in memory/)
  t.match(table.stdout, /\| shared \| shared \| 64 \| 16 \| 10% \| [0-9.]+% \| /)
})

t.test('simulate --layouts says which layouts there are', async t => {
  const result = await redirfs('simulate', '--layouts', 'class,striped')
  t.not(result.code, 0)
  t.match(result.stderr, /layouts are class, shared/)
  const cluster = await redirfs('simulate', '--nodes', '2', '--layouts', 'shared')
  t.not(cluster.code, 0)
  t.match(cluster.stderr, /^redirfs: --nodes simulates the class layout only: the shared layout does not run on a cluster yet\n$/)
})
