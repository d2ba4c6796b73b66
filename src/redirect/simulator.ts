/**
 * Drives the protocol with trainer-like traces, with no FUSE and no disk.
 *
 * Each epoch opens every sample once in a fresh random order (optionally
 * with extra opens, as DistributedSampler padding or a stray `cat` would
 * add). `readers` opens are outstanding at once and loads finish in random
 * order, so waits, readahead and out-of-order fills are exercised just as
 * the real engine sees them. Time is not modelled: only who gets what.
 */
import type { FileId, Layout, VcId } from './layout'
import { Protocol, type LoadPlan, type RedirectMode } from './protocol'
import type { ProtocolCounters } from './counters'
import { SeededRandom } from './random'
import { appendTo } from '../util/lists'

export interface SimulationOptions {
  mode: RedirectMode
  memoryBytes: number
  epochs: number
  seed: number
  /** Opens outstanding at once (DataLoader workers). */
  readers?: number
  /** Extra random opens appended to each epoch. */
  extraOpensPerEpoch?: number
  /** Files the chunk source cannot read. */
  unreadable?: ReadonlySet<FileId>
  /** Opens per epoch, when an epoch is cut short (a run stopped mid-epoch); default: every file once. */
  opensPerEpoch?: number
  /** Share of opens that ask for their own file (`OpenOptions.exact`: a loader that stats the path first). */
  exactShare?: number
  /** mix: files per block (`ProtocolOptions.mixBlock`). */
  mixBlock?: number
  /** Continue from this protocol's state instead of a fresh one. */
  protocol?: Protocol
  /** Called after every protocol step, e.g. to check memory. */
  onStep?: (protocol: Protocol) => void
}

export interface ServedOpen {
  readonly opened: FileId
  readonly exact: boolean
  /** The file whose bytes the open got, or undefined for an I/O error. */
  readonly served: FileId | undefined
  /** The read that brought those bytes into memory: a load's piece of one PC (files read together, stored together). */
  readonly read: string | undefined
}

export interface SimulationResult {
  /** Per epoch, every open in the order it was answered. */
  readonly epochs: ServedOpen[][]
  /** Per epoch, every file whose bytes entered memory for it, once per load (a chunk read ahead for the next epoch counts there). */
  readonly loaded: FileId[][]
  readonly counters: ProtocolCounters
  /** Chunk loads the last epoch made for the epoch after it, which the run never has (at most one per VC). */
  readonly loadsPastTheEnd: number
}

interface PendingOpen { file: FileId, exact: boolean }

export function simulate (layout: Layout, options: SimulationOptions): SimulationResult {
  const protocol = options.protocol ?? new Protocol(layout, { mode: options.mode, memoryBytes: options.memoryBytes, seed: options.seed, mixBlock: options.mixBlock })
  const random = new SeededRandom(options.seed + 1)
  const readers = options.readers ?? 1
  const unreadable = options.unreadable ?? new Set<FileId>()
  const epochs: ServedOpen[][] = []
  const loaded: FileId[][] = []
  const readOf = new Map<FileId, string>()
  const noteRead = (plan: LoadPlan, file: FileId): void => { readOf.set(file, `${plan.id}/${layout.filePc[file]}`) }
  let loadedForNextEpoch: FileId[] = []
  let loadsForNextEpoch = 0

  for (let epoch = 0; epoch < options.epochs; epoch++) {
    const trace = random.shuffle(layout.files.map((_, id) => id as FileId))
    for (let i = 0; i < (options.extraOpensPerEpoch ?? 0); i++) trace.push(random.below(layout.files.length) as FileId)
    if (options.opensPerEpoch !== undefined) trace.length = Math.min(trace.length, options.opensPerEpoch)
    const answered: ServedOpen[] = []
    const loadedThisEpoch: FileId[] = loadedForNextEpoch
    loadedForNextEpoch = []
    loadsForNextEpoch = 0
    const noteLoaded = (plan: LoadPlan, files: readonly FileId[]): void => {
      if (plan.forNextEpoch !== true) {
        loadedThisEpoch.push(...files)
        return
      }
      loadedForNextEpoch.push(...files)
      loadsForNextEpoch++
    }
    const inFlight: { plan: LoadPlan, opener?: PendingOpen }[] = []
    const waiting = new Map<VcId, PendingOpen[]>()
    let outstanding = 0
    let next = 0

    const answer = (open: PendingOpen, served: FileId | undefined): void => {
      answered.push({ opened: open.file, exact: open.exact, served, read: served === undefined ? undefined : readOf.get(served) })
      outstanding--
      const vc = protocol.vcOf(open.file)
      const ahead = protocol.readahead(vc)
      if (ahead !== undefined) inFlight.push({ plan: ahead })
    }
    const ask = (open: PendingOpen, retry: boolean): void => {
      const decision = protocol.open(open.file, { retry, exact: open.exact })
      options.onStep?.(protocol)
      if (decision.kind === 'serve') answer(open, decision.file)
      else if (decision.kind === 'load') inFlight.push({ plan: decision.plan, opener: open })
      else if (decision.kind === 'wait') appendTo(waiting, decision.vc, open)
      else throw new Error('a single node never ships files, so it never reclaims')
    }

    while (next < trace.length || outstanding > 0) {
      const canOpen = next < trace.length && outstanding < readers
      if (canOpen && (inFlight.length === 0 || random.below(2) === 0)) {
        outstanding++
        ask({ file: trace[next++], exact: random.below(1000) < (options.exactShare ?? 0) * 1000 }, false)
        continue
      }
      if (inFlight.length === 0) throw new Error('simulation stalled: opens wait but no load is in flight')
      const { plan, opener } = inFlight.splice(random.below(inFlight.length), 1)[0]
      const delivered = new Set(plan.files.filter(file => !unreadable.has(file)))
      const outcome = protocol.finishLoad(plan, delivered)
      for (const file of [...outcome.placed, ...(outcome.served === undefined ? [] : [outcome.served])]) noteRead(plan, file)
      noteLoaded(plan, outcome.placed)
      if (outcome.served !== undefined && !outcome.placed.includes(outcome.served)) loadedThisEpoch.push(outcome.served)
      options.onStep?.(protocol)
      if (opener !== undefined) answer(opener, outcome.served)
      const woken = waiting.get(plan.vc) ?? []
      waiting.delete(plan.vc)
      for (const open of woken) ask(open, true)
    }
    // Readahead still in flight completes, as it would in the engine.
    for (const { plan } of inFlight.splice(0)) {
      const outcome = protocol.finishLoad(plan, new Set(plan.files.filter(file => !unreadable.has(file))))
      for (const file of outcome.placed) noteRead(plan, file)
      noteLoaded(plan, outcome.placed)
    }
    epochs.push(answered)
    loaded.push(loadedThisEpoch)
  }
  return { epochs, loaded, counters: { ...protocol.counters }, loadsPastTheEnd: loadsForNextEpoch }
}
