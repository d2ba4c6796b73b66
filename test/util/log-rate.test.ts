import t from 'tap'
import { LogRate } from '../../src/util/log-rate'

t.test('past its lines a minute a log holds lines back, and the next line that goes out says how many', async t => {
  let now = 0
  const rate = new LogRate(2, () => now)
  t.same([rate.take(), rate.take(), rate.take(), rate.take()], [{ log: true, held: 0 }, { log: true, held: 0 }, { log: false }, { log: false }])
  now = 59_999
  t.same(rate.take(), { log: false }, 'still the same minute')
  now = 60_000
  t.same(rate.take(), { log: true, held: 3 }, 'a new minute: out, with the three held back')
  t.same(rate.take(), { log: true, held: 0 })
})
