/**
 * Drives the protocol with trainer-like traces, with no FUSE and no disk.
 *
 * Each epoch opens every sample once in a fresh random order (optionally
 * with extra opens, as DistributedSampler padding or a stray `cat` would
 * add). `readers` opens are outstanding at once and loads finish in random
 * order, so waits, readahead and out-of-order fills are exercised just as
 * the real engine sees them. Time is not modelled: only who gets what.
 */
import type { FileId, Layout } from './layout'
import { Protocol, type LoadPlan, type RedirectMode } from './protocol'
import type { ProtocolCounters } from './counters'
import { SeededRandom } from './random'
import type { SharedLayout } from './shared-layout'
import { SharedProtocol, type SharedLoadPlan } from './shared-protocol'
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

/** What one load asks for, in terms the trace needs: which files, which read, and for which epoch. */
interface TracePlan {
  readonly id: number
  readonly files: readonly FileId[]
  /** Everything it reads is for the next epoch: past the last epoch, a load the run never needed. */
  readonly forNextEpoch?: boolean
}

/** A finished load: the files it placed for this epoch and for the next, its opener's answer, and the waits it ends. */
interface TraceOutcome {
  readonly placed: readonly FileId[]
  readonly placedForNextEpoch: readonly FileId[]
  readonly served?: FileId
  readonly wakes: readonly number[]
}

/** A protocol as the trace drives it: the class-chunk one (protocol.ts) or the shared-chunk one (shared-protocol.ts). */
interface TraceDriver<Plan extends TracePlan> {
  readonly counters: ProtocolCounters
  /** Answers an open; a wait names what it waits on, which a finished load's `wakes` names again. */
  open (open: PendingOpen, retry: boolean): { kind: 'serve', file: FileId } | { kind: 'load', plan: Plan } | { kind: 'wait', on: number }
  /** `epoch`: the trace's epoch, which a load's files are counted in or after. */
  finishLoad (plan: Plan, delivered: ReadonlySet<FileId>, epoch: number): TraceOutcome
  /** A load to start ahead of need, after an open of `file` was answered. */
  readahead (file: FileId): Plan | undefined
  /** The physical chunk a file is read with. */
  pcOf (file: FileId): number
}

export function simulate (layout: Layout, options: SimulationOptions): SimulationResult {
  const protocol = options.protocol ?? new Protocol(layout, { mode: options.mode, memoryBytes: options.memoryBytes, seed: options.seed, mixBlock: options.mixBlock })
  const step = (): void => options.onStep?.(protocol)
  const driver: TraceDriver<LoadPlan> = {
    counters: protocol.counters,
    open ({ file, exact }, retry) {
      const decision = protocol.open(file, { retry, exact })
      step()
      if (decision.kind === 'reclaim') throw new Error('a single node never ships files, so it never reclaims')
      return decision.kind === 'wait' ? { kind: 'wait', on: decision.vc } : decision
    },
    finishLoad (plan, delivered) {
      const outcome = protocol.finishLoad(plan, delivered)
      step()
      const forNext = plan.forNextEpoch === true
      return { served: outcome.served, placed: forNext ? [] : outcome.placed, placedForNextEpoch: forNext ? outcome.placed : [], wakes: [plan.vc] }
    },
    readahead: file => protocol.readahead(protocol.vcOf(file)),
    pcOf: file => layout.filePc[file]
  }
  return runTrace(driver, layout.files.length, options)
}

export interface SharedSimulationOptions extends Omit<SimulationOptions, 'mode' | 'protocol' | 'onStep' | 'mixBlock'> {
  onStep?: (protocol: SharedProtocol) => void
  /** Every load, as it ends. */
  onLoad?: (plan: SharedLoadPlan) => void
}

/** The same traces over the shared-chunk layout and its protocol. */
export function simulateShared (layout: SharedLayout, options: SharedSimulationOptions): SimulationResult {
  const protocol = new SharedProtocol(layout, { memoryBytes: options.memoryBytes, seed: options.seed })
  const step = (): void => options.onStep?.(protocol)
  const driver: TraceDriver<SharedLoadPlan> = {
    counters: protocol.counters,
    open ({ file, exact }, retry) {
      const decision = protocol.open(file, { retry, exact })
      step()
      return decision.kind === 'wait' ? { kind: 'wait', on: decision.group } : decision
    },
    finishLoad (plan, delivered, epoch) {
      options.onLoad?.(plan)
      const outcome = protocol.finishLoad(plan, delivered)
      step()
      // Each class keeps its own epochs: one not opened yet in this trace epoch is still in the last, and what it calls its next epoch is this one.
      const taken = [...outcome.placed.map(file => [file, protocol.epochOf(protocol.groupOf(file))] as const),
        ...outcome.placedForNextEpoch.map(file => [file, protocol.epochOf(protocol.groupOf(file)) + 1] as const)]
      return {
        ...outcome,
        placed: taken.filter(([, classEpoch]) => classEpoch <= epoch).map(([file]) => file),
        placedForNextEpoch: taken.filter(([, classEpoch]) => classEpoch > epoch).map(([file]) => file)
      }
    },
    readahead: () => protocol.readahead(),
    pcOf: file => layout.filePc[file]
  }
  return runTrace(driver, layout.files.length, options)
}

function runTrace<Plan extends TracePlan> (protocol: TraceDriver<Plan>, fileCount: number, options: Omit<SimulationOptions, 'mode' | 'protocol' | 'onStep'>): SimulationResult {
  const random = new SeededRandom(options.seed + 1)
  const readers = options.readers ?? 1
  const unreadable = options.unreadable ?? new Set<FileId>()
  const epochs: ServedOpen[][] = []
  const loaded: FileId[][] = []
  const readOf = new Map<FileId, string>()
  const noteRead = (plan: Plan, file: FileId): void => { readOf.set(file, `${plan.id}/${protocol.pcOf(file)}`) }
  let loadedForNextEpoch: FileId[] = []
  let loadsForNextEpoch = 0
  const everyFile = Array.from({ length: fileCount }, (_, id) => id as FileId)

  for (let epoch = 0; epoch < options.epochs; epoch++) {
    const trace = random.shuffle([...everyFile])
    for (let i = 0; i < (options.extraOpensPerEpoch ?? 0); i++) trace.push(random.below(fileCount) as FileId)
    if (options.opensPerEpoch !== undefined) trace.length = Math.min(trace.length, options.opensPerEpoch)
    const answered: ServedOpen[] = []
    const loadedThisEpoch: FileId[] = loadedForNextEpoch
    loadedForNextEpoch = []
    loadsForNextEpoch = 0
    const noteLoaded = (plan: Plan, outcome: TraceOutcome): void => {
      loadedThisEpoch.push(...outcome.placed)
      loadedForNextEpoch.push(...outcome.placedForNextEpoch)
      if (plan.forNextEpoch === true) loadsForNextEpoch++
    }
    const inFlight: { plan: Plan, opener?: PendingOpen }[] = []
    const waiting = new Map<number, PendingOpen[]>()
    let outstanding = 0
    let next = 0

    const answer = (open: PendingOpen, served: FileId | undefined): void => {
      answered.push({ opened: open.file, exact: open.exact, served, read: served === undefined ? undefined : readOf.get(served) })
      outstanding--
      const ahead = protocol.readahead(open.file)
      if (ahead !== undefined) inFlight.push({ plan: ahead })
    }
    const ask = (open: PendingOpen, retry: boolean): void => {
      const decision = protocol.open(open, retry)
      if (decision.kind === 'serve') answer(open, decision.file)
      else if (decision.kind === 'load') inFlight.push({ plan: decision.plan, opener: open })
      else appendTo(waiting, decision.on, open)
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
      const outcome = protocol.finishLoad(plan, delivered, epoch)
      for (const file of [...outcome.placed, ...outcome.placedForNextEpoch, ...(outcome.served === undefined ? [] : [outcome.served])]) noteRead(plan, file)
      noteLoaded(plan, outcome)
      if (outcome.served !== undefined && !outcome.placed.includes(outcome.served)) loadedThisEpoch.push(outcome.served)
      if (opener !== undefined) answer(opener, outcome.served)
      for (const key of outcome.wakes) {
        const woken = waiting.get(key) ?? []
        waiting.delete(key)
        for (const open of woken) ask(open, true)
      }
    }
    // Readahead still in flight completes, as it would in the engine.
    for (const { plan } of inFlight.splice(0)) {
      const outcome = protocol.finishLoad(plan, new Set(plan.files.filter(file => !unreadable.has(file))), epoch)
      for (const file of [...outcome.placed, ...outcome.placedForNextEpoch]) noteRead(plan, file)
      noteLoaded(plan, outcome)
    }
    epochs.push(answered)
    loaded.push(loadedThisEpoch)
  }
  return { epochs, loaded, counters: { ...protocol.counters }, loadsPastTheEnd: loadsForNextEpoch }
}
