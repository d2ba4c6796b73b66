// Mutual-TLS material made by openssl for cluster tests: a cluster CA, a
// node certificate it signs for 127.0.0.1, and another CA nobody trusts.
import { execFile } from 'node:child_process'
import path from 'node:path'
import { promisify } from 'node:util'

const run = promisify(execFile)

export async function makeCertificates (dir: string): Promise<{ cert: string, key: string, ca: string, otherCa: string }> {
  const script = `
set -e
cd "${dir}"
for ca in ca other-ca; do
  openssl req -x509 -newkey rsa:2048 -nodes -keyout $ca.key -out $ca.pem -days 2 -subj /CN=redirfs-test-$ca 2>/dev/null
done
openssl req -newkey rsa:2048 -nodes -keyout node.key -out node.csr -subj /CN=127.0.0.1 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext
openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out node.pem -days 2 -extfile san.ext 2>/dev/null
`
  await run('bash', ['-c', script])
  return { cert: path.join(dir, 'node.pem'), key: path.join(dir, 'node.key'), ca: path.join(dir, 'ca.pem'), otherCa: path.join(dir, 'other-ca.pem') }
}
