#!/usr/bin/env node
// `npx exchangepace`: the operator's command line (lib/operator/cli.ts).
import { main } from './cli.js'

process.exitCode = await main(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr, env: process.env })
