// The ETags a mount keeps (src/s3/etags.ts): S3's MD5 forms in columns,
// any other form as it came, each given back exactly as listed, and after
// the tree's renumbering under its new entry.
import t from 'tap'
import { EtagColumn } from '../../src/s3/etags'

const FORMS = ['"0cc175b9c0f1b6a831c399e269772661"', '"92eb5ffee6ae2fec3ad71c777531578f-3"', '"92eb5ffee6ae2fec3ad71c777531578f-10000"', 'W/"weak"', '"ABCDEF0123456789ABCDEF0123456789"', 'plain', '""']

t.test('each ETag is given back as it was set, whatever its form', async t => {
  const column = new EtagColumn(2)
  FORMS.forEach((etag, entry) => column.set(entry * 3, etag))
  t.same(FORMS.map((_, entry) => column.get(entry * 3)), FORMS)
  t.equal(column.get(1), '', 'an entry without an ETag')
  t.equal(column.get(10_000), '', 'an entry past the end')
})

t.test('renumbered gives entry from[i] as entry i', async t => {
  const column = new EtagColumn()
  FORMS.forEach((etag, entry) => column.set(entry, etag))
  const from = [5, 0, 3, 1, 42]
  const renumbered = column.renumbered(from)
  t.same(from.map((_, i) => renumbered.get(i)), [FORMS[5], FORMS[0], FORMS[3], FORMS[1], ''])
})
