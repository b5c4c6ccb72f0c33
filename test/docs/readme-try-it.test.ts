import t from 'tap'
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import ts from 'typescript'
import { extractBlocks } from '../helpers/doc-blocks.js'
import { freePort } from '../helpers/port.js'

/**
 * The README's "Try it", run as a reader would: its server block (type-checked with the others by
 * test/docs/docs.test.ts) runs as written against the built package, on a free port instead of
 * 3000, and each command of its console session runs through bash and must print what the README
 * shows, but for the headers it says it leaves out. Then what it says about starting again: the
 * reset it gives lifts the lockout, and so does a restart.
 */

const repo = join(import.meta.dirname, '..', '..')
const readme = readFileSync(join(repo, 'README.md'), 'utf8')
const section = readme.slice(readme.indexOf('## Try it'), readme.indexOf('\n## ', readme.indexOf('## Try it') + 1))
const blocks = extractBlocks('README.md', section).blocks
const program = blocks.find(block => block.lang === 'ts')!.code
const session = blocks.find(block => block.lang === 'console')!.code
const reset = /`(app\.pace\.reset\([^`]+\))`/.exec(section)![1]

/** The session's commands, each with the output the README shows for it. */
const steps = session.split(/^\$ /m).slice(1).map(step => {
  const [command, ...output] = step.split('\n')
  return { command, output: output.join('\n').trim() }
})

/** What curl printed, without the headers the README says it leaves out. */
function shown (stdout: string): string {
  return stdout.replace(/\r/g, '').split('\n').filter(line => !/^(date|connection|keep-alive):/i.test(line)).join('\n').trim()
}

/** A module that stops performance.now at one moment, loaded before the README's server. */
const STOPPED_CLOCK = 'data:text/javascript,performance.now = () => 1e6'

const hasCurl = spawnSync('curl', ['--version']).status === 0
if (!hasCurl && process.env.CI === undefined) t.skip('the README\'s session needs curl, which this machine lacks')
else {
  const port = await freePort()
  const onPort = (text: string) => text.replaceAll('127.0.0.1:3000', `127.0.0.1:${port}`)
  // The block as written, its port moved, then a way for the test to run the README's reset in it.
  const source = ts.transpileModule(program.replace('port: 3000', `port: ${port}`), {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 }
  }).outputText + `\nprocess.on('message', async () => { await ${reset}; process.send('reset') })\nprocess.send('listening')\n`

  /**
   * The README's server, in a process of its own, once it listens. Its clock (performance.now, the
   * plugin's default) stands still, so that the waits print as the README shows them however long
   * the session takes on a busy machine: a second between the fifth failure and the last command
   * would print 719.
   */
  async function start (tt: typeof t): Promise<ChildProcess> {
    const child = spawn(process.execPath, ['--import', STOPPED_CLOCK, '--input-type=module', '-e', source], { cwd: repo, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
    tt.teardown(() => stop(child))
    const [message] = await once(child, 'message')
    tt.equal(message, 'listening', 'the server listens')
    return child
  }

  async function stop (child: ChildProcess): Promise<void> {
    if (child.exitCode !== null || child.signalCode !== null) return
    child.kill()
    await once(child, 'exit')
  }

  const run = async (command: string) => shown((await promisify(execFile)('bash', ['-c', onPort(command)])).stdout)

  t.test('the session prints a 200, a 401, then 429s with the headers the README shows', async t => {
    const server = await start(t)
    t.ok(steps.length >= 4, `${steps.length} commands`)
    t.match(steps.map(step => step.output.split('\n')[0]), [/^HTTP\/1.1 200 OK$/, /^HTTP\/1.1 401 Unauthorized$/, /429$/, /^HTTP\/1.1 429 Too Many Requests$/])
    for (const { command, output } of steps) t.equal(await run(command), output, command)

    t.test('the README\'s reset lets the right secret in again', async t => {
      server.send('reset')
      t.equal((await once(server, 'message'))[0], 'reset')
      t.match(await run(steps[0].command), /^HTTP\/1.1 200 OK\n/)
    })
  })

  t.test('a restart starts afresh: the buckets lived in the process', async t => {
    const first = await start(t)
    for (const { command } of steps) await run(command)
    t.match(await run(steps[0].command), /^HTTP\/1.1 429 /, 'locked out')
    await stop(first)
    await start(t)
    t.equal(await run(steps[0].command), steps[0].output, 'the right secret gets its token again')
  })
}
