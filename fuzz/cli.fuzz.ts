// Fuzzes the command line (src/cli/main.ts): argv drawn from the real
// commands and options (as commander has them), with values of every kind
// (sizes, numbers, lists, URLs, paths that exist and do not, awkward text),
// options of other commands, unknown ones, missing and extra arguments, in
// any order. The CLI runs in-process, case after case, in a child process
// of its own (fuzz/cli-child.js), against places that are the fuzzer's: a
// small dataset and a pack of it, a file, an empty directory; mountpoints
// that never exist (so nothing is ever mounted) and an S3 endpoint where
// nothing listens. `mount` runs in the foreground (the background start
// spawns a daemon, which no case may leave). The property: exit code 0 (with
// nothing on stderr but warnings), or 1 with one line on stderr saying
// why (the help text when no command is given), never a stack trace,
// "unexpected error", an exit of the process, or a hang; and at the end
// nothing mounted and no process the CLI started left running.
import { spawn, type ChildProcess } from 'node:child_process'
import { promises as fs, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import readline from 'node:readline'
import t from 'tap'
import { AWKWARD_NUMBERS, AWKWARD_STRINGS, type Draw } from './draw'
import { fuzz, lineProblem } from './run'

interface OptionInfo { long?: string, short?: string, takes: boolean, negate: boolean, choices: string[] | null }
interface CommandInfo { name: string, args: Array<{ required: boolean, variadic: boolean }>, options: OptionInfo[] }
interface Answer { code: number, exited: number | null, stdout: string, stderr: string }

const work = mkdtempSync(path.join(os.tmpdir(), 'redirfs-fuzz-cli-'))
const at = (...parts: string[]): string => path.join(work, ...parts)
for (const dir of ['cwd', 'home', 'run', 'empty', 'data/cat', 'data/dog']) mkdirSync(at(dir), { recursive: true, mode: 0o700 })
for (let i = 0; i < 3; i++) for (const label of ['cat', 'dog']) writeFileSync(at('data', label, `${i}.jpg`), `${label} ${i}\n`.repeat(50))
writeFileSync(at('file.txt'), 'not a directory\n')
// The working directory is no place to mount ('' and '.' name it): not empty, and no sample in it to mount over it.
writeFileSync(at('cwd', 'notes.txt'), 'not a sample\n')
writeFileSync(at('list.txt'), 'cat/0.jpg\ndog/1.jpg\n')
t.teardown(async () => { await fs.rm(work, { recursive: true, force: true }) })

/** Where commands are pointed: places of the fuzzer's; a mountpoint never exists, so nothing is mounted. */
const SOURCES = [at('data'), at('pack'), at('file.txt'), at('empty'), at('missing'), 'relative/dir', 's3://fuzz/data', 's3://Bad_Bucket/x', 's3://', '']
const MOUNTPOINTS = [at('missing-mountpoint'), at('file.txt'), at('missing', 'deeper')]
const FILES = [at('list.txt'), at('file.txt'), at('missing'), at('empty'), at('logs', 'x.log'), '/dev/null', '']
const URLS = ['http://127.0.0.1:9', 'https://127.0.0.1:9/', 'http://user:secret@127.0.0.1:9', 'http://[::1]:9', 'ftp://127.0.0.1', 'http://', '127.0.0.1:9', 's3://fuzz']
const ADDRESSES = ['127.0.0.1:9', '127.0.0.1:0', '[::1]:9', ':80', 'localhost:65536', 'a:b', '0.0.0.0:9', '127.0.0.1:9,127.0.0.1:10', '127.0.0.1:9,127.0.0.1:9']
const SIZES = ['1G', '512M', '300K', '0', '-1G', '1.5GiB', '5Q', '1e3', '99999T', '4096', ' 2g ', 'G']
const LISTS = ['jpg,png', '.jpg', ',', 'strict,pool', 'mix,nope', '0.1,0.5', '0,1', '8,16', '1,1,1', 'a,,b']

/** Awkward text, less what names a large directory that is not the fuzzer's ('/', '../..' from the working directory is the temporary directory): a scan of it is no case. */
const AWKWARD = AWKWARD_STRINGS.filter(text => !['/', '//', '../..'].includes(text))

/** A value for an option: of the kind its name suggests, mostly; of any kind sometimes. */
function valueFor (draw: Draw, option: OptionInfo, plausible: boolean): string {
  const name = option.long ?? ''
  if (option.choices !== null && (plausible || draw.chance(0.6))) return draw.pick(option.choices)
  if (!plausible && draw.chance(0.25)) return draw.pick([...AWKWARD, ...AWKWARD_NUMBERS.map(String), String(draw.int(-3, 70000))])
  if (/file|include|tls|dir|source/.test(name)) return draw.pick(FILES.concat(SOURCES))
  if (/endpoint/.test(name)) return draw.pick(URLS)
  if (/peers|listen|metrics/.test(name)) return draw.pick(ADDRESSES)
  if (/memory|size/.test(name) && !/sizes/.test(name)) return draw.pick(SIZES)
  if (/sizes|modes|extensions|memory/.test(name)) return draw.pick(LISTS)
  if (/timeout|wait/.test(name)) return draw.pick(['0.5', '20', '0', '0.0001', '86401', 'x', '-1'])
  return String(draw.pick([0, 1, 2, 3, 8, 64, 65535, 65536, 1000, -1]))
}

/** An argument: a place of the fuzzer's of the kind the command takes there. */
function argumentFor (draw: Draw, command: string, index: number): string {
  // Never a mountpoint that could be mounted on: an awkward one may name the working directory ('', '.').
  if (draw.chance(0.1) && !(command === 'mount' && index === 1)) return draw.pick(AWKWARD)
  if (command === 'mount' || command === 'pack') return index === 0 ? draw.pick(SOURCES) : command === 'mount' ? draw.pick(MOUNTPOINTS) : draw.pick([at(`out-${draw.seed}`), at('missing', 'out'), at('file.txt'), 's3://fuzz/out'])
  if (command === 'verify') return draw.pick(SOURCES)
  return draw.pick(MOUNTPOINTS.concat([at('empty'), at('data')]))
}

function drawArgv (draw: Draw, global: OptionInfo[], commands: CommandInfo[]): string[] {
  const flag = (o: OptionInfo): string => (draw.chance(0.8) ? o.long : o.short) ?? o.long ?? o.short ?? '--x'
  const everyOption = [...global, ...commands.flatMap(c => c.options)]
  if (draw.chance(0.05)) return Array.from({ length: draw.int(0, 6) }, () => draw.chance(0.5) ? draw.pick(AWKWARD_STRINGS) : flag(draw.pick(everyOption)))
  const command = draw.chance(0.05) ? { name: draw.pick(['frobnicate', 'MOUNT', '']), args: [], options: [] } : draw.pick(commands)
  const args = command.args.flatMap((arg, i) => (arg.required ? draw.chance(0.95) : draw.chance(0.5)) ? [argumentFor(draw, command.name, i)] : [])
  if (draw.chance(0.05)) args.push(argumentFor(draw, command.name, args.length))
  const options: string[] = []
  // A third of the cases are plausible: a few options of the command's own, each with a value of its kind, so that commands get past their checks and run.
  const plausible = draw.chance(0.33)
  for (let n = plausible ? draw.int(0, 2) : draw.int(0, 6); n > 0; n--) {
    // The global options (--version) end a case at once: rarely.
    const pool = (plausible || draw.chance(0.85)) && command.options.length > 0 ? command.options : draw.chance(0.9) ? everyOption : global
    const option = !plausible && draw.chance(0.03) ? { long: draw.pick(['--bogus', '--memory=1G', '-', '--', '-x']), takes: false, negate: false, choices: null } : draw.pick(pool)
    options.push(flag(option))
    if (option.takes && (plausible || draw.chance(0.95))) options.push(valueFor(draw, option, plausible))
  }
  const argv = [command.name, ...(draw.chance(0.5) ? [...args, ...options] : [...options, ...args])]
  // The bounds no case may pass: a mount in the foreground, a simulation of a small dataset, packs of one node.
  if (command.name === 'mount') argv.push('--foreground')
  if (command.name === 'simulate') argv.push('--files', '150', '--epochs', '1', '--chunk-sizes', '8', '--memory', '0.5', '--nodes', String(draw.pick([1, 2])))
  if (command.name === 'pack') argv.push('--nodes', String(draw.pick([1, 2])))
  return argv
}

/** The child the CLI runs in; started again after a case it did not answer. */
class Cli {
  private child!: ChildProcess
  private answers!: AsyncIterator<string>
  /** What the child wrote itself (the CLI's output is captured per case): why it died, when it does. */
  private said = ''
  exited: string | undefined
  info!: { options: OptionInfo[], commands: CommandInfo[] }

  async start (): Promise<void> {
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      HOME: at('home'),
      REDIRFS_RUNTIME_DIR: at('run'),
      // Every S3 request goes where nothing listens, with credentials that need no lookup.
      AWS_ENDPOINT_URL: 'http://127.0.0.1:9',
      AWS_ACCESS_KEY_ID: 'fuzz',
      AWS_SECRET_ACCESS_KEY: 'fuzz',
      AWS_REGION: 'us-east-1',
      AWS_EC2_METADATA_DISABLED: 'true'
    }
    this.child = spawn(process.execPath, [path.join(__dirname, 'cli-child.js')], { cwd: at('cwd'), env, stdio: ['pipe', 'ignore', 'pipe', 'pipe'] })
    this.said = ''
    this.exited = undefined
    this.child.stderr!.setEncoding('utf8').on('data', (text: string) => { this.said = (this.said + text).slice(-4000) })
    this.child.once('exit', (code, signal) => { this.exited = `the CLI's process ended (${signal ?? `exit ${code}`})${this.said !== '' ? `: ${this.said}` : ''}` })
    this.answers = readline.createInterface({ input: this.child.stdio[3] as NodeJS.ReadableStream })[Symbol.asyncIterator]()
    this.info = JSON.parse((await this.answers.next()).value as string)
  }

  async run (argv: string[], ms: number): Promise<Answer | undefined> {
    this.child.stdin!.write(JSON.stringify({ argv }) + '\n')
    let timer: NodeJS.Timeout | undefined
    const line = await Promise.race([this.answers.next(), new Promise<undefined>(resolve => { timer = setTimeout(() => resolve(undefined), ms) })])
    clearTimeout(timer)
    if (line === undefined || line.done === true) return undefined
    return JSON.parse(line.value) as Answer
  }

  /** The processes the CLI's process started that still run (their command lines). */
  children (): string[] {
    const children = readFileSync(`/proc/${this.child.pid!}/task/${this.child.pid!}/children`, 'utf8').trim()
    return children === '' ? [] : children.split(' ').map(pid => { try { return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ') } catch { return pid } })
  }

  stop (): void { this.child.kill('SIGKILL') }
}

/** Why an answer breaks the property, or undefined. */
function problemOf (argv: string[], answer: Answer): string | undefined {
  if (answer.exited !== null && answer.exited !== answer.code) return `main ended with code ${answer.code}, then the process was made to exit with ${answer.exited}`
  if (/unexpected error|\n\s+at |thrown out of main/.test(answer.stderr)) return `a bug's report: ${answer.stderr.slice(0, 2000)}`
  if (answer.code !== 0 && answer.code !== 1) return `exit code ${answer.code}`
  const lines = answer.stderr.split('\n').filter((line, i, all) => line !== '' || i < all.length - 1)
  const said = lines.filter(line => !line.startsWith('redirfs: warning: '))
  if (answer.code === 0) return said.length === 0 ? undefined : `exit 0 with ${JSON.stringify(answer.stderr.slice(0, 500))} on stderr`
  if (said[0]?.startsWith('Usage: redirfs') === true && argv.every(arg => arg === '' || arg.startsWith('-'))) return undefined // no command: the help
  if (said.length !== 1 || !said[0].startsWith('redirfs: ')) return `exit 1 with ${said.length} lines on stderr: ${JSON.stringify(answer.stderr.slice(0, 500))}`
  return lineProblem(said[0])
}

const cli = new Cli()
t.before(async () => { await cli.start() })
t.teardown(() => { cli.stop() })

t.test('any argv of the real options exits 0, or 1 with one line that says why', async t => {
  const made = await cli.run(['pack', at('data'), at('pack'), '--chunk-size', '2'], 60_000)
  t.equal(made?.code, 0, `a pack to verify and mount: ${made?.stderr ?? 'no answer'}`)
  const outcomes = new Map<string, number>()
  await fuzz(t, 'cli', { runs: 1000, seconds: 45 }, async draw => {
    const argv = drawArgv(draw, cli.info.options, cli.info.commands)
    const answer = await cli.run(argv, 30_000)
    if (answer === undefined) {
      await new Promise(resolve => setTimeout(resolve, 100))
      const why = cli.exited ?? 'did not finish within 30 s (a hang)'
      cli.stop()
      await cli.start()
      throw new Error(`redirfs ${JSON.stringify(argv)}: ${why}`)
    }
    const key = `${argv[0] ?? '(none)'} ${answer.code === 0 ? 'ran' : /run with --help|^Usage/.test(answer.stderr) ? 'usage' : 'refused'}`
    outcomes.set(key, (outcomes.get(key) ?? 0) + 1)
    if (process.env.FUZZ_CLI_SHOW === '1') t.comment(`${JSON.stringify(argv)} -> ${answer.code}: ${answer.stderr.trim().slice(0, 300)}`)
    const problem = problemOf(argv, answer)
    if (problem !== undefined) throw new Error(`redirfs ${JSON.stringify(argv)}: ${problem}`)
  }, 60_000)
  // Nothing left behind: no mount under the fuzzer's places, no process the CLI started still running.
  const mounts = (await fs.readFile('/proc/mounts', 'utf8')).split('\n').filter(line => line.split(' ')[1]?.startsWith(work))
  t.same(mounts, [], 'nothing mounted under the fuzzer\'s places')
  t.same(cli.children(), [], 'no process the CLI started is left')
  // Where the cases went: commander's usage errors, the commands' own refusals, or a run that succeeded.
  t.comment(`cli: outcomes ${[...outcomes].sort().map(([what, n]) => `${what} ${n}`).join(', ')}`)
})
