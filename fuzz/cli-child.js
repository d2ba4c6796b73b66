// The CLI run in-process for fuzz/cli.fuzz.ts, case after case: the built
// CLI (dist/cli/main.js, what bin/redirfs runs) is given each argv that
// arrives on stdin (a JSON line) and answers on fd 3 with its exit code and
// what it wrote to stdout and stderr. First it sends the commands and
// options commander has, for the fuzzer to draw from. Started without an
// IPC channel: `redirfs daemon` must find none, as at a terminal.
'use strict'
const { writeSync } = require('node:fs')
const readline = require('node:readline')
const path = require('node:path')
const { main, program } = require(path.resolve(__dirname, '../dist/cli/main.js'))

/** @param {unknown} message */
const answer = message => { writeSync(3, JSON.stringify(message) + '\n') }

/** @param {import('commander').Option} option */
const optionOf = option => ({ long: option.long, short: option.short, takes: option.required || option.optional, negate: option.negate, choices: option.argChoices ?? null })

/** @param {import('commander').Command} command */
const commandOf = command => ({ name: command.name(), args: command.registeredArguments.map(arg => ({ required: arg.required, variadic: arg.variadic })), options: command.options.map(optionOf) })

answer({ options: program.options.map(optionOf), commands: program.commands.map(commandOf) })

/**
 * Replaces a method for the length of a case.
 * @param {object} owner
 * @param {string} name
 * @param {Function} replacement
 */
const replace = (owner, name, replacement) => { Object.defineProperty(owner, name, { value: replacement, configurable: true, writable: true }) }
const original = { out: process.stdout.write, err: process.stderr.write, exit: process.exit }

/**
 * What a foreground mount registered for its own signals goes with the case.
 * @param {'SIGINT' | 'SIGTERM'} signal
 * @param {Function[]} before
 */
const forget = (signal, before) => { for (const listener of process.listeners(signal)) if (!before.includes(listener)) process.off(signal, listener) }

readline.createInterface({ input: process.stdin }).on('line', async line => {
  const { argv } = JSON.parse(line)
  let stdout = ''
  let stderr = ''
  /** @type {number | undefined} */
  let exited
  const listening = { SIGINT: process.listeners('SIGINT'), SIGTERM: process.listeners('SIGTERM') }
  replace(process.stdout, 'write', (/** @type {unknown} */ chunk) => { stdout += String(chunk); return true })
  replace(process.stderr, 'write', (/** @type {unknown} */ chunk) => { stderr += String(chunk); return true })
  // The CLI ends through main, or (a failed foreground mount, whose server or socket could keep it alive)
  // by an exit it schedules once main has printed its line: an exit is noted, and not made (the next
  // case needs this process); the caller checks it is the code main set.
  replace(process, 'exit', (/** @type {number | undefined} */ code) => { exited ??= Number(code ?? process.exitCode ?? 0) })
  process.exitCode = undefined
  /** @type {number | undefined} */
  let code
  try {
    await main(['node', 'redirfs', ...argv])
    code = Number(process.exitCode ?? 0)
    // An exit scheduled for the next turn (setImmediate) comes before this timer.
    await new Promise(resolve => setTimeout(resolve, 10))
  } catch (err) {
    stderr += `(thrown out of main: ${err instanceof Error ? err.stack : String(err)})\n`
  } finally {
    replace(process.stdout, 'write', original.out)
    replace(process.stderr, 'write', original.err)
    replace(process, 'exit', original.exit)
    forget('SIGINT', listening.SIGINT)
    forget('SIGTERM', listening.SIGTERM)
  }
  answer({ code: code ?? 1, exited: exited ?? null, stdout, stderr })
})
