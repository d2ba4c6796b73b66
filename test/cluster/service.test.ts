// The peer service's checks of a sync, on its own: the other parts are
// small stand-ins that record what reaches them (the real nodes are in
// test/cluster/cluster.test.ts).
import * as grpc from '@grpc/grpc-js'
import pino from 'pino'
import t from 'tap'
import type { Membership } from '../../src/cluster/membership'
import { PeerRefusal } from '../../src/cluster/peer-server'
import { PeerService, type PeerServiceParts } from '../../src/cluster/service'
import type { Sync } from '../../src/cluster/sync'
import type { SyncRequest } from '../../src/cluster/wire'
import type { Layout } from '../../src/redirect/layout'

function serviceRecordingSyncs (): { service: PeerService, received: SyncRequest[] } {
  const received: SyncRequest[] = []
  const parts = {
    layout: { vcs: [{}, {}], files: [{}, {}, {}, {}] } as unknown as Layout,
    membership: { node: 0, checkNode: () => undefined } as unknown as Membership,
    sync: { receive: (request: SyncRequest) => received.push(request) } as unknown as Sync,
    log: pino({ level: 'silent' })
  } as unknown as PeerServiceParts
  return { service: new PeerService(parts), received }
}

function statusOf (call: () => unknown): number | undefined {
  try { call() } catch (error) { return error instanceof PeerRefusal ? error.status : -1 }
  return undefined
}

t.test('a sync naming a virtual chunk or a file outside the layout is refused and not applied', async t => {
  const { service, received } = serviceRecordingSyncs()
  t.equal(statusOf(() => service.sync({ node: 1, standby: [], served: [{ vc: 2, file: 0, batch: 1 }] })), grpc.status.INVALID_ARGUMENT)
  t.equal(statusOf(() => service.sync({ node: 1, standby: [], served: [{ vc: 1, file: 4, batch: 1 }] })), grpc.status.INVALID_ARGUMENT)
  t.equal(received.length, 0)
})

t.test('a well-formed sync is handed to the sync', async t => {
  const { service, received } = serviceRecordingSyncs()
  const request = { node: 1, standby: [], served: [{ vc: 1, file: 3, batch: 1 }] }
  t.equal(statusOf(() => service.sync(request)), undefined)
  t.same(received, [request])
})
