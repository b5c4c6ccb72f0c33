import { main } from '../../lib/operator/cli.js'

/** What a run of the CLI wrote, and its exit code. */
export interface CliRun {
  stdout: string
  stderr: string
  code: number
}

/**
 * Runs `exchangepace` in this process with `argv` and the environment `env` (nothing of the test's
 * own), and `ioredis` as its way to load ioredis when given: what it wrote and its exit code.
 */
export async function runCli (argv: string[], env: Record<string, string> = {}, ioredis?: () => Promise<unknown>): Promise<CliRun> {
  const out = { stdout: '', stderr: '', code: -1 }
  out.code = await main(argv, {
    stdout: { write: (text: string) => { out.stdout += text } },
    stderr: { write: (text: string) => { out.stderr += text } },
    env,
    ioredis
  })
  return out
}
