// A failed run lists its failed assertions again at its end, each under the
// subtests it sits in, with where it failed (scripts/tap-failures.mjs): CI
// shows only a run's last lines.
import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'

const SCRIPT = path.resolve(__dirname, '../../scripts/tap-failures.mjs')

const LOG = `TAP version 14
# Subtest: test/a.test.ts
    # Subtest: one thing
        ok 1 - fine
        not ok 2 - should be equal
          ---
          found: 1
          wanted: 2
          at:
            fileName: test/a.test.ts
            lineNumber: 12
          stack: |
            Test.<anonymous> (test/a.test.ts:12:5)
          source: |
            t.equal(found, 2)
        
            not ok 9 - a line of TAP the source quotes
          ...
        1..2
    not ok 1 - one thing # time=3ms
    # Subtest: later
        not ok 1 - not yet # TODO
        1..1
    ok 2 - later
    1..2
not ok 1 - test/a.test.ts # time=100ms
# Subtest: test/b.test.ts
    not ok 1 - timeout!
      ---
      expired: b
      ...
    1..1
not ok 2 - test/b.test.ts # time=1ms
`

t.test('each failed assertion is listed once, under its subtests, with where it failed and what was found, not what its diagnostics quote', async t => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'redirfs-tap-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  writeFileSync(path.join(dir, 'run.tap'), LOG)
  const listed = execFileSync('node', [SCRIPT, path.join(dir, 'run.tap')], { encoding: 'utf8' })
  t.equal(listed.trim(), [
    `# 2 failed (listed again here, from ${path.join(dir, 'run.tap')}):`,
    '# test/a.test.ts > one thing',
    '#   not ok 2 - should be equal',
    '#     at: test/a.test.ts:12',
    '#     found: 1',
    '#     wanted: 2',
    '# test/b.test.ts',
    '#   not ok 1 - timeout!',
    '#     expired: b'
  ].join('\n'))
})

t.test('a run without failures lists nothing', async t => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'redirfs-tap-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  writeFileSync(path.join(dir, 'run.tap'), 'TAP version 14\nok 1 - fine\n1..1\n')
  t.equal(execFileSync('node', [SCRIPT, path.join(dir, 'run.tap')], { encoding: 'utf8' }), '')
})
