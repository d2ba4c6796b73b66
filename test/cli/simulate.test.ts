// `redirfs simulate --nodes`: the cluster protocol over a synthetic dataset,
// through the real CLI: every epoch exact, and prefetch saving requests.
import t from 'tap'
import { redirfs } from '../helpers/mount'

t.test('simulate --nodes 3: every epoch exact; prefetch means fewer requests per remote sample', async t => {
  const result = await redirfs('simulate', '--nodes', '3', '--files', '3000', '--classes', '10', '--chunk-sizes', '16', '--memory', '0.25', '--modes', 'strict,pool', '--epochs', '2', '--json')
  t.equal(result.code, 0, result.stderr)
  const rows = JSON.parse(result.stdout) as { mode: string, prefetch: boolean, exactEpochs: number, epochs: number, requestsPerRemoteSample: number, remoteShare: number }[]
  t.equal(rows.length, 4)
  for (const row of rows) t.equal(row.exactEpochs, row.epochs, `${row.mode}, prefetch ${row.prefetch}: every epoch exact`)
  for (const mode of ['strict', 'pool']) {
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
