// Real S3 endpoints for tests, each on loopback on ports of its own and
// stopped in teardown whatever the test's outcome: moto_server, a mock that
// is quick to start, and Ceph's RADOS Gateway, a production S3 server
// (scripts/rgw.sh brings a single-node cluster up and down). The S3 tests
// run against both (`forEachS3Server`): one suite, parameterised by server.
// Each server's environment and the test process's own are cleared of every
// AWS_* and proxy variable the machine may carry (a profile, a CA bundle, an
// endpoint) and given the server's keys, a region and the endpoint, so what
// reaches the server is only what the test chose.
//
// RGW always checks signatures and keys; moto does only with
// `authentication`: an IAM user with full rights is made first (moto allows
// unsigned set-up requests until told otherwise), then /moto-api/reset-auth
// turns checking on, and the user's keys are the ones handed out. (moto
// 5.2 then rejects the signature of any listing whose prefix or delimiter
// holds a '/': tests that list keep it off.)
import { spawn, execFile, execFileSync, type ChildProcess } from 'node:child_process'
import { accessSync, constants, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3'
import tap, { type Test } from 'tap'
import { compareKeys } from '../../src/s3/key-order'
import { ObjectStore, type ObjectStoreOptions } from '../../src/s3/store'
import { StoreError } from '../../src/s3/store-error'

interface Teardown { teardown: (fn: () => Promise<void> | void) => void }

export interface Credentials { readonly accessKeyId: string, readonly secretAccessKey: string }

export type S3ServerKind = 'moto' | 'rgw'

export interface S3Server {
  readonly kind: S3ServerKind
  /** Whether it checks signatures and keys: RGW always, moto with `authentication`. */
  readonly checksKeys: boolean
  readonly endpoint: string
  readonly region: string
  readonly credentials: Credentials
  /** For a child process (the redirfs CLI, the aws CLI, Python): keys, region and endpoint set, nothing else of AWS's, and none of tap's NODE_OPTIONS (as a user runs them). */
  readonly env: NodeJS.ProcessEnv
  stop: () => Promise<void>
}

export const TEST_REGION = 'us-east-1'
export const TEST_CREDENTIALS: Credentials = { accessKeyId: 'redirfs-test-key', secretAccessKey: 'redirfs-test-secret' }

const run = promisify(execFile)
const RGW_SCRIPT = path.resolve(__dirname, '../../scripts/rgw.sh')

/** The servers the S3 suite runs against: both, or those REDIRFS_S3_SERVERS names (say `moto`, for a quick loop). */
export const S3_SERVERS: readonly S3ServerKind[] = serversToTest(process.env.REDIRFS_S3_SERVERS)

function serversToTest (setting: string | undefined): S3ServerKind[] {
  if (setting === undefined || setting.trim() === '') return ['moto', 'rgw']
  const named = setting.split(',').map(name => name.trim())
  const unknown = named.filter(name => name !== 'moto' && name !== 'rgw')
  if (unknown.length > 0) throw new Error(`REDIRFS_S3_SERVERS names ${unknown.join(', ')}: the servers are moto and rgw`)
  return named as S3ServerKind[]
}

/**
 * Declares `suite` once per server of S3_SERVERS, each in a subtest named
 * after the server, with a server of its own started first (one per test
 * file and kind) and stopped when the subtest ends.
 */
export function forEachS3Server (suite: (t: Test, server: S3Server) => Promise<void> | void, options: { authentication?: boolean } = {}): void {
  for (const kind of S3_SERVERS) {
    tap.test(kind, async t => {
      await suite(t, await startS3Server(t, { ...options, kind }))
    })
  }
}

/** Drops every variable that could steer an AWS client somewhere the test did not choose. */
export function withoutAwsVariables (env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const clean: NodeJS.ProcessEnv = {}
  for (const [name, value] of Object.entries(env)) {
    if (name.startsWith('AWS_') || /^(https?|all|no)_proxy$/i.test(name)) continue
    clean[name] = value
  }
  return clean
}

/** The AWS variables of a test: fixed keys and region, no shared files, no instance metadata. */
export function testAwsVariables (endpoint: string, credentials: Credentials = TEST_CREDENTIALS): NodeJS.ProcessEnv {
  return {
    AWS_ACCESS_KEY_ID: credentials.accessKeyId,
    AWS_SECRET_ACCESS_KEY: credentials.secretAccessKey,
    AWS_DEFAULT_REGION: TEST_REGION,
    AWS_REGION: TEST_REGION,
    AWS_ENDPOINT_URL: endpoint,
    AWS_CONFIG_FILE: '/nonexistent/redirfs-test/aws-config',
    AWS_SHARED_CREDENTIALS_FILE: '/nonexistent/redirfs-test/aws-credentials',
    AWS_EC2_METADATA_DISABLED: 'true'
  }
}

/** Clears this test process of AWS variables (each test file runs in a process of its own). */
export function isolateAwsEnvironment (): void {
  for (const name of Object.keys(process.env)) {
    if (name.startsWith('AWS_') || /^(https?|all|no)_proxy$/i.test(name)) delete process.env[name]
  }
  Object.assign(process.env, { AWS_CONFIG_FILE: '/nonexistent/redirfs-test/aws-config', AWS_SHARED_CREDENTIALS_FILE: '/nonexistent/redirfs-test/aws-credentials', AWS_EC2_METADATA_DISABLED: 'true' })
}

export async function freePort (): Promise<number> {
  return await new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo
      server.close(() => resolve(port))
    })
  })
}

function findOnPath (command: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    const file = path.join(dir, command)
    try {
      accessSync(file, constants.X_OK)
      return file
    } catch {}
  }
  return undefined
}

export async function startS3Server (t: Teardown, options: { authentication?: boolean, kind?: S3ServerKind } = {}): Promise<S3Server> {
  isolateAwsEnvironment()
  if (options.kind === 'rgw') return await startRgw(t)
  const command = findOnPath('moto_server')
  if (command === undefined) throw new Error('moto_server not found: the set-up installs moto[server] with pip')
  // A free port can be taken between finding it and moto binding it; then moto exits saying so, and we try another.
  for (let attempt = 1; ; attempt++) {
    const port = await freePort()
    const endpoint = `http://127.0.0.1:${port}`
    const child = spawn(command, ['-H', '127.0.0.1', '-p', String(port)], {
      env: { ...withoutAwsVariables(process.env), ...testAwsVariables(endpoint) },
      stdio: ['ignore', 'ignore', 'pipe'],
      detached: true
    })
    let output = ''
    child.stderr?.on('data', (chunk: Buffer) => { output = (output + chunk.toString()).slice(-4000) })
    const stop = stopper(child)
    t.teardown(stop)
    const started = await answering(endpoint, child)
    if (!started) {
      await stop()
      if (attempt < 5 && /address already in use|is in use/i.test(output)) continue
      throw new Error(`moto_server did not start on ${endpoint}: ${output.trim().split('\n').slice(-3).join(' | ')}`)
    }
    let credentials = TEST_CREDENTIALS
    if (options.authentication === true) credentials = await enableAuthentication(endpoint)
    const { NODE_OPTIONS: _tapHooks, ...userEnv } = withoutAwsVariables(process.env)
    return { kind: 'moto', checksKeys: options.authentication === true, endpoint, region: TEST_REGION, credentials, env: { ...userEnv, ...testAwsVariables(endpoint, credentials) }, stop }
  }
}

/**
 * A single-node Ceph RGW under a temporary directory (scripts/rgw.sh):
 * up takes a few seconds, down well under one. The script is told this
 * process's pid, so a test process that dies before its teardown takes the
 * cluster with it.
 */
async function startRgw (t: Teardown): Promise<S3Server> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'redirfs-rgw-'))
  let stopping: Promise<void> | undefined
  const down = (): void => {
    try { execFileSync('bash', [RGW_SCRIPT, 'down', dir], { stdio: 'ignore' }) } catch {}
    rmSync(dir, { recursive: true, force: true })
  }
  process.once('exit', down)
  const stop = async (): Promise<void> => {
    stopping ??= (async () => {
      process.removeListener('exit', down)
      await run('bash', [RGW_SCRIPT, 'down', dir]).catch(() => {})
      rmSync(dir, { recursive: true, force: true })
    })()
    await stopping
  }
  t.teardown(stop)
  const started = await run('bash', [RGW_SCRIPT, 'up', dir, '--owner', String(process.pid), '--memory', String(2 ** 30)], { env: withoutAwsVariables(process.env) })
    .catch((err: { stderr?: string }) => { throw new Error(`Ceph RGW did not start: ${(err.stderr ?? String(err)).trim()}`) })
  const { endpoint, accessKeyId, secretAccessKey } = JSON.parse(started.stdout) as { endpoint: string, accessKeyId: string, secretAccessKey: string }
  const credentials = { accessKeyId, secretAccessKey }
  const { NODE_OPTIONS: _tapHooks, ...userEnv } = withoutAwsVariables(process.env)
  return { kind: 'rgw', checksKeys: true, endpoint, region: TEST_REGION, credentials, env: { ...userEnv, ...testAwsVariables(endpoint, credentials) }, stop }
}

/** Polls until the server answers HTTP (true) or its process ends (false). */
async function answering (endpoint: string, child: ChildProcess): Promise<boolean> {
  let exited = child.exitCode !== null
  child.once('exit', () => { exited = true })
  // A guard against a server that neither answers nor exits, not a timing: moto starts in a second or two.
  for (let polls = 0; polls < 1200; polls++) {
    if (exited) return false
    try {
      await fetch(`${endpoint}/moto-api/`, { signal: AbortSignal.timeout(5000) })
      return true
    } catch {}
    await new Promise(resolve => setTimeout(resolve, 100))
  }
  return false
}

function stopper (child: ChildProcess): () => Promise<void> {
  let stopping: Promise<void> | undefined
  const pid = child.pid
  const killGroup = (signal: NodeJS.Signals): void => {
    if (pid === undefined) return
    try { process.kill(-pid, signal) } catch {}
  }
  // Should the test process die before its teardown, the server goes with it.
  const onExit = (): void => killGroup('SIGKILL')
  process.once('exit', onExit)
  return async () => {
    stopping ??= new Promise<void>(resolve => {
      process.removeListener('exit', onExit)
      if (child.exitCode !== null || child.signalCode !== null) return resolve()
      const kill = setTimeout(() => killGroup('SIGKILL'), 5000)
      child.once('exit', () => { clearTimeout(kill); resolve() })
      killGroup('SIGTERM')
    })
    await stopping
  }
}

async function enableAuthentication (endpoint: string): Promise<Credentials> {
  const script = [
    'import boto3, json, sys',
    'iam = boto3.client("iam", endpoint_url=sys.argv[1], region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")',
    'iam.create_user(UserName="redirfs-test")',
    'iam.put_user_policy(UserName="redirfs-test", PolicyName="all", PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))',
    'key = iam.create_access_key(UserName="redirfs-test")["AccessKey"]',
    'print(json.dumps({"accessKeyId": key["AccessKeyId"], "secretAccessKey": key["SecretAccessKey"]}))'
  ].join('\n')
  const { stdout } = await run('python3', ['-c', script, endpoint], { env: withoutAwsVariables(process.env) })
  const credentials = JSON.parse(stdout) as Credentials
  const answer = await fetch(`${endpoint}/moto-api/reset-auth`, { method: 'POST', headers: { 'Content-Type': 'text/plain' }, body: '0' })
  if (!answer.ok) throw new Error(`moto would not turn authentication on: ${answer.status} ${await answer.text()}`)
  return credentials
}

export async function createBucket (server: Pick<S3Server, 'endpoint' | 'credentials'>, name: string): Promise<void> {
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true' // as ObjectStore does
  const client = new S3Client({ endpoint: server.endpoint, region: TEST_REGION, credentials: server.credentials, forcePathStyle: true, maxAttempts: 1 })
  try {
    await client.send(new CreateBucketCommand({ Bucket: name }))
  } finally {
    client.destroy()
  }
}

/** A store for tests: this server, its keys and region; closed in teardown. */
export function testStore (t: Teardown, server: Pick<S3Server, 'endpoint' | 'credentials'>, bucket: string, options: Partial<ObjectStoreOptions> = {}): ObjectStore {
  const store = new ObjectStore({ bucket, endpoint: server.endpoint, region: TEST_REGION, credentials: server.credentials, ...options })
  t.teardown(async () => await store.close())
  return store
}

/** Uploads every file under `dir` to `prefix + relative path` (with '/'). Resolves with the keys in S3's order. */
export async function uploadTree (store: ObjectStore, dir: string, prefix: string): Promise<string[]> {
  const files: string[] = []
  const walk = (relative: string): void => {
    for (const name of readdirSync(path.join(dir, relative))) {
      const child = relative === '' ? name : `${relative}/${name}`
      if (statSync(path.join(dir, child)).isDirectory()) walk(child)
      else files.push(child)
    }
  }
  walk('')
  await Promise.all(files.map(async file => await store.put(prefix + file, readFileSync(path.join(dir, file)))))
  return files.map(file => prefix + file).sort(compareKeys)
}

/** Deterministic bytes of a seed (xorshift32), fast enough for megabytes. */
export function seededBytes (seed: number, length: number): Buffer {
  const bytes = Buffer.allocUnsafe(length)
  let state = (seed * 2654435761) >>> 0 || 1
  for (let i = 0; i < length; i += 4) {
    state ^= state << 13; state >>>= 0
    state ^= state >>> 17
    state ^= state << 5; state >>>= 0
    for (let b = 0; b < 4 && i + b < length; b++) bytes[i + b] = (state >>> (8 * b)) & 0xff
  }
  return bytes
}

/** The StoreError a call fails with; anything else (a success included) fails the test. */
export async function storeFailure (call: Promise<unknown>): Promise<StoreError> {
  const outcome = await call.then(() => undefined, (err: unknown) => err)
  if (outcome instanceof StoreError) return outcome
  throw new Error(`expected a StoreError, got ${outcome === undefined ? 'success' : String(outcome)}`, { cause: outcome })
}
