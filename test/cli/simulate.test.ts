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
  const result = await redirfs('simulate', '--files', '4000', '--classes', '8', '--chunk-sizes', '16', '--memory', '0.25', '--epochs', '3', '--batch-size', '64', '--json')
  t.equal(result.code, 0, result.stderr)
  const rows = JSON.parse(result.stdout) as { mode: string, readAmplification: number, sameChunkRatio: number, repeatedPairsRatio: number }[]
  t.same(rows.map(r => r.mode), ['strict', 'pool', 'mix'], 'the default modes')
  const [strict, pool, mix] = rows
  t.ok(strict.readAmplification > 1, 'strict reads chunks more than once')
  t.equal(pool.readAmplification, 1)
  t.equal(mix.readAmplification, 1)
  t.ok(mix.sameChunkRatio < pool.sameChunkRatio, `same-chunk pairs vs uniform: mix ${mix.sameChunkRatio.toFixed(2)}x < pool ${pool.sameChunkRatio.toFixed(2)}x`)
  const table = await redirfs('simulate', '--files', '4000', '--classes', '8', '--chunk-sizes', '16', '--memory', '0.25', '--epochs', '2')
  t.match(table.stdout, /\| mix \| 16 \| 25% \| 1\.00 \| 1\.00 \|/)
  t.match(table.stdout, /pairs repeated from the epoch before/)
})
