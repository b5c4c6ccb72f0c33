import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import type { TapTest } from './shared-behaviour.js'

/** An example started as its own process, listening. */
export interface ExampleProcess {
  readonly child: ChildProcess
  /** The address it listens on, as it printed it. */
  readonly base: string
  /** Its exit code, once it has exited (null: ended by a signal). */
  readonly exited: Promise<number | null>
}

/**
 * Starts `node <script>` with the environment `env`, and resolves once its standard output has
 * printed a line `listening` matches, whose first group is the address it listens on; rejects when
 * it exits first or prints none within 20 s, with what it wrote to standard error. Killed when `t`
 * ends, if it still runs.
 */
export async function startExample (t: TapTest, script: string, env: NodeJS.ProcessEnv, listening: RegExp): Promise<ExampleProcess> {
  const child = spawn(process.execPath, [script], { env, stdio: ['ignore', 'pipe', 'pipe'] })
  const exited = once(child, 'exit').then(([code]) => code as number | null)
  t.teardown(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })
  let output = ''
  let errors = ''
  child.stderr.on('data', (chunk: Buffer) => { errors += chunk.toString() })
  const base = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => { reject(new Error(`${script} did not listen within 20 s:\n${errors}`)) }, 20_000)
    exited.then(code => { clearTimeout(timer); reject(new Error(`${script} exited (${String(code)}) before it listened:\n${errors}`)) }, reject)
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString()
      const found = listening.exec(output)
      if (found !== null) {
        clearTimeout(timer)
        resolve(found[1])
      }
    })
  })
  return { child, base, exited }
}
