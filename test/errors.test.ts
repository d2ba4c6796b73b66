// What every message a user reads goes through last (src/cli/main.ts): one line, whatever a path or a key holds.
import t from 'tap'
import { printable } from '../src/errors'

t.test('printable writes line breaks, control characters and line separators as \\uXXXX, and leaves all else', async t => {
  t.equal(printable('a\nb\r\tc\u0000\u001b[31m\u007f\u0085\u2028\u2029'), 'a\\u000ab\\u000d\\u0009c\\u0000\\u001b[31m\\u007f\\u0085\\u2028\\u2029')
  t.equal(printable('café 猫 /data/train (1).jpg'), 'café 猫 /data/train (1).jpg')
})
