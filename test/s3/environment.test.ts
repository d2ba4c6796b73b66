// What the store takes from its environment as the SDK would: credentials
// from the whole default chain (variables, a profile in a shared file),
// the endpoint from AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, the region
// from AWS_REGION or us-east-1; and the environment the S3 helper hands to
// child processes. Each test sets the variables it uses and restores them.
// Against moto with its key checks on, and Ceph RGW.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { execFile } from 'node:child_process'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import type { Test } from 'tap'
import { ObjectStore } from '../../src/s3/store'
import { startFaultProxy } from '../helpers/fault-proxy'
import { createBucket, forEachS3Server, freePort, seededBytes, storeFailure, testStore, TEST_REGION } from '../helpers/s3-server'

/** Sets variables for one test; the old values come back in teardown. */
function setVariables (t: Test, variables: Record<string, string | undefined>): void {
  const saved = Object.fromEntries(Object.keys(variables).map(name => [name, process.env[name]]))
  const apply = (values: Record<string, string | undefined>): void => {
    for (const [name, value] of Object.entries(values)) {
      if (value === undefined) delete process.env[name]
      else process.env[name] = value
    }
  }
  apply(variables)
  t.teardown(() => apply(saved))
}

/** A store as the CLI would make it: nothing but the bucket, and what the options say. */
function bareStore (t: Test, bucket: string, options: Partial<ConstructorParameters<typeof ObjectStore>[0]> = {}): ObjectStore {
  const store = new ObjectStore({ bucket, retryDelayMs: 5, ...options })
  t.teardown(async () => await store.close())
  return store
}

forEachS3Server(async (t, secured) => {
  await createBucket(secured, 'chain')
  await testStore(t, secured, 'chain').put('k.bin', seededBytes(60, 64))

  t.test('credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY when none are given', async t => {
    setVariables(t, { AWS_ACCESS_KEY_ID: secured.credentials.accessKeyId, AWS_SECRET_ACCESS_KEY: secured.credentials.secretAccessKey })
    const store = bareStore(t, 'chain', { endpoint: secured.endpoint })
    t.ok((await store.getObject('k.bin')).equals(seededBytes(60, 64)))
  })

  t.test('credentials come from a profile of a shared credentials file, named by AWS_PROFILE', async t => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'redirfs-aws-'))
    t.teardown(() => rmSync(dir, { recursive: true, force: true }))
    const file = path.join(dir, 'credentials')
    writeFileSync(file, `[default]\naws_access_key_id = AKIANOTTHISONE000000\naws_secret_access_key = x\n\n[training]\naws_access_key_id = ${secured.credentials.accessKeyId}\naws_secret_access_key = ${secured.credentials.secretAccessKey}\n`)
    setVariables(t, { AWS_SHARED_CREDENTIALS_FILE: file, AWS_PROFILE: 'training' })
    const store = bareStore(t, 'chain', { endpoint: secured.endpoint })
    t.ok((await store.getObject('k.bin')).equals(seededBytes(60, 64)))
  })

  t.test('no credentials anywhere is denied, in one line that says where credentials are looked for', async t => {
    const store = bareStore(t, 'chain', { endpoint: secured.endpoint })
    const err = await storeFailure(store.getObject('k.bin'))
    t.equal(err.kind, 'denied')
    t.equal(err.message, 'no AWS credentials found: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run where an instance or container role is available')
    t.equal(store.stats().retries, 0)
  })

  t.test('the endpoint comes from AWS_ENDPOINT_URL_S3, then AWS_ENDPOINT_URL, when --s3-endpoint is not given', async t => {
    for (const variable of ['AWS_ENDPOINT_URL_S3', 'AWS_ENDPOINT_URL']) {
      await t.test(variable, async t => {
        setVariables(t, { [variable]: secured.endpoint })
        const store = bareStore(t, 'chain', { credentials: secured.credentials })
        t.ok((await store.getObject('k.bin')).equals(seededBytes(60, 64)))
      })
    }
    await t.test('AWS_ENDPOINT_URL_S3 before AWS_ENDPOINT_URL', async t => {
      setVariables(t, { AWS_ENDPOINT_URL_S3: secured.endpoint, AWS_ENDPOINT_URL: `http://127.0.0.1:${await freePort()}` })
      const store = bareStore(t, 'chain', { credentials: secured.credentials })
      t.ok((await store.getObject('k.bin')).equals(seededBytes(60, 64)))
    })
    await t.test('and a message names that endpoint', async t => {
      const endpoint = `http://127.0.0.1:${await freePort()}`
      setVariables(t, { AWS_ENDPOINT_URL_S3: endpoint })
      const store = bareStore(t, 'chain', { credentials: secured.credentials })
      t.equal((await storeFailure(store.getObject('k.bin'))).message, `cannot reach the S3 endpoint ${endpoint} (connection refused); check --s3-endpoint`)
    })
  })

  t.test('the region signed for is the option, else AWS_REGION, else us-east-1', async t => {
    const proxy = await startFaultProxy(t, secured.endpoint)
    const scope = (): string => /Credential=[^/]+\/\d+\/([^/]+)\/s3\//.exec(String(proxy.log.at(-1)?.headers.authorization))?.[1] ?? 'none'
    const read = async (options: { region?: string }): Promise<void> => {
      const store = bareStore(t, 'chain', { endpoint: proxy.endpoint, credentials: secured.credentials, ...options })
      await store.head('k.bin')
    }
    await read({})
    t.equal(scope(), 'us-east-1', 'nothing set')
    setVariables(t, { AWS_REGION: 'eu-west-3' })
    await read({})
    t.equal(scope(), 'eu-west-3', 'AWS_REGION')
    await read({ region: 'ap-south-2' })
    t.equal(scope(), 'ap-south-2', 'the option')
  })

  t.test('pathStyle puts the bucket in the path for a host name endpoint', async t => {
    const proxy = await startFaultProxy(t, secured.endpoint)
    const endpoint = proxy.endpoint.replace('127.0.0.1', 'localhost')
    const store = bareStore(t, 'chain', { endpoint, credentials: secured.credentials, pathStyle: true })
    t.ok((await store.getObject('k.bin')).equals(seededBytes(60, 64)))
    t.match(proxy.log.at(-1), { bucket: 'chain', key: 'k.bin', headers: { host: endpoint.slice('http://'.length) } })
  })

  t.test('the helper\'s env lets a child process reach the server, and carries no profile or CA bundle', async t => {
    t.equal(secured.env.AWS_PROFILE, undefined)
    t.equal(secured.env.AWS_CA_BUNDLE, undefined)
    t.equal(secured.env.AWS_REGION, TEST_REGION)
    t.equal(secured.env.AWS_ENDPOINT_URL, secured.endpoint)
    // boto3 comes with moto[server]; it reads the same variables as the aws CLI and the redirfs CLI's SDK.
    const script = 'import boto3, json; print(json.dumps([[o["Key"], o["Size"]] for o in boto3.client("s3").list_objects_v2(Bucket="chain")["Contents"]]))'
    const { stdout } = await promisify(execFile)('python3', ['-c', script], { env: secured.env })
    t.same(JSON.parse(stdout), [['k.bin', 64]])
  })
}, { authentication: true })
