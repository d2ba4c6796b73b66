// The stats of a mount as a daemon of this version writes them (src/stats.ts): a single node with its runs, and a cluster node.
import type { MountStats } from '../../src/stats'

const protocol = {
  opens: 9120,
  memoryHits: 8001,
  redirects: 4210,
  exactOpens: 12,
  exactRepeats: 3,
  waitedOpens: 1100,
  failedOpens: 0,
  chunkLoads: 160,
  readaheadLoads: 40,
  readaheadHeldBack: 5,
  filesLoaded: 9200,
  wastedFiles: 80,
  wastedBytes: 123456,
  failedFiles: 0,
  rollovers: 30,
  resets: 1,
  newRuns: 2,
  returnedFiles: 0,
  residentBytes: 2 ** 28,
  peakResidentBytes: 2 ** 29,
  inflightBytes: 2 ** 22,
  remoteOpens: 0,
  prefetchShipped: 0,
  reclaims: 0,
  reclaimedFiles: 0,
  lostHeldFiles: 0,
  lostAnswers: 0,
  takeovers: 0
}

/** The stats of a mount as a daemon of this version writes them. */
export const singleStats: MountStats = {
  pid: 4242,
  dataset: '/data/imagenet/train',
  mountpoint: '/mnt/train',
  mode: 'mix',
  chunkSize: 64,
  seed: 0,
  uptimeSeconds: 321,
  layout: { samples: 9120, groups: 10, someGroups: ['ant', 'bee', 'cat'], grouping: 'the directory holding each sample', skippedEntries: 0, physicalChunks: 150, virtualChunks: 40, datasetBytes: 2 ** 31, hash: 'abc123', nodes: 1, kind: 'class' },
  memory: { budgetBytes: 2 ** 30, boundBytes: 2 ** 20, sampleBufferBytes: 2 ** 29, idleSampleBufferBytes: 2 ** 24, processRssBytes: 2 ** 30, jsHeapBytes: 2 ** 26, externalBytes: 2 ** 29 },
  protocol,
  source: { kind: 'pack', directIo: 'true', openSegments: 3, chunksRead: 160, bytesRead: 2 ** 31, corruptChunks: 0 },
  fs: { backend: 'native', openHandles: 7, passthroughOpens: 2, failedOpens: 0, lookups: 100, reads: 9000 },
  runs: {
    runs: 2,
    concurrentRuns: 0,
    current: { key: 'run-2', trainers: [4300], trainer: 'python3 train.py (pid 4300)', since: '2026-01-01T00:00:00.000Z' },
    alongside: [{ key: 'run-3', trainers: [4400], trainer: 'python3 eval.py (pid 4400)' }],
    exact: true,
    orphanOpens: 0
  },
  metrics: '127.0.0.1:9400'
}

/** A cluster node's: the cluster section too. */
export const clusterStats: MountStats = {
  ...singleStats,
  protocol: { ...protocol, remoteOpens: 300, prefetchShipped: 900, reclaims: 4, reclaimedFiles: 20 },
  cluster: {
    node: 1,
    nodes: 3,
    storage: 'shared',
    listen: '10.0.0.2:7000',
    dataPort: 7001,
    remoteMemoryBytes: 2 ** 28,
    tls: true,
    peers: [{ node: 0, address: '10.0.0.1:7000', state: 'alive' }, { node: 1, address: '10.0.0.2:7000', state: 'self' }, { node: 2, address: '10.0.0.3:7000', state: 'dead' }],
    quorum: true,
    ownedVirtualChunks: 40,
    generation: { number: 2, key: 'gen-2' },
    takeovers: 1,
    unsynced: 0,
    peersLost: 1,
    peersRejoined: 0,
    generations: 2,
    fenced: 0,
    refusedRequests: 0,
    remoteOpens: 2000,
    prefetchUsed: 1500,
    remoteRequests: 700,
    remoteSamplesReceived: 2100,
    prefetchReceived: 1400,
    givenBack: 10,
    mirrorBytes: 2 ** 26,
    peakMirrorBytes: 2 ** 27
  }
}
