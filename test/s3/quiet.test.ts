// The store prints nothing of its own: the SDK's notice that its releases
// after January 2027 need Node 22 would reach every user of redirfs, which
// runs on Node 20 with this SDK version pinned. The SDK checks once per
// process, at its first client, so this file makes no other client first.
import t from 'tap'
import { ObjectStore } from '../../src/s3/store'
import { isolateAwsEnvironment } from '../helpers/s3-server'

t.test('making a store emits no Node version warning', async t => {
  isolateAwsEnvironment()
  t.equal(process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED, undefined)
  const warnings: string[] = []
  const onWarning = (warning: Error): void => { warnings.push(warning.message) }
  process.on('warning', onWarning)
  t.teardown(() => { process.removeListener('warning', onWarning) })
  const store = new ObjectStore({ bucket: 'quiet', endpoint: 'http://127.0.0.1:9', region: 'us-east-1', credentials: { accessKeyId: 'a', secretAccessKey: 'b' } })
  await store.close()
  await new Promise(resolve => setImmediate(resolve))
  t.same(warnings, [])
})
