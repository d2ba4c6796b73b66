// The peer protocol's TypeScript types are generated from proto/redirfs.proto
// (scripts/proto-types.sh) and committed: they must be what the generator
// makes of the .proto as it stands, or a changed message would compile
// against stale types.
import { execFile } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'

const ROOT = path.join(__dirname, '..', '..')
const COMMITTED = path.join(ROOT, 'src', 'cluster', 'generated')

function files (root: string, relative = ''): string[] {
  return readdirSync(path.join(root, relative)).sort().flatMap(name => {
    const child = path.join(relative, name)
    return statSync(path.join(root, child)).isDirectory() ? files(root, child) : [child]
  })
}

t.test('the committed generated types are what scripts/proto-types.sh makes of proto/redirfs.proto', async t => {
  const out = mkdtempSync(path.join(os.tmpdir(), 'redirfs-proto-types-'))
  t.teardown(() => { rmSync(out, { recursive: true, force: true }) })
  await promisify(execFile)('bash', [path.join(ROOT, 'scripts', 'proto-types.sh'), out])
  t.same(files(COMMITTED), files(out), 'the same files')
  for (const file of files(out)) {
    t.equal(readFileSync(path.join(COMMITTED, file), 'utf8'), readFileSync(path.join(out, file), 'utf8'), `${file}: run scripts/proto-types.sh after changing the .proto`)
  }
})
