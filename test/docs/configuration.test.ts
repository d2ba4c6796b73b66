// The option reference (docs/configuration.md) is the CLI's own --help:
// written by scripts/configuration-doc.sh, so it cannot drift from the code.
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { CLI_ENV } from '../helpers/mount'

const ROOT = path.resolve(__dirname, '../..')

t.test('docs/configuration.md is what the CLI\'s --help says now (run scripts/configuration-doc.sh after changing an option)', async t => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'redirfs-config-doc-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const fresh = path.join(dir, 'configuration.md')
  execFileSync('bash', [path.join(ROOT, 'scripts/configuration-doc.sh'), fresh], { env: CLI_ENV })
  t.equal(readFileSync(path.join(ROOT, 'docs/configuration.md'), 'utf8'), readFileSync(fresh, 'utf8'))
})
