// Node's module hooks for the tests: lib/ and test/ are TypeScript, loaded as esbuild compiles
// them, one file at a time, as tsc would for the package's tsconfig.json (no type check: tsc does
// that in `npm test`). tsx does the same, but minifies the output's whitespace and leaves the
// source out of its source maps unless NODE_V8_COVERAGE is set: tap's coverage then maps every
// line of a file that loaded as run, and a function never called counted as covered. Here every
// statement keeps its line and the maps carry the source, so the coverage check means what it
// says (docs/design.md, Decisions).
import { existsSync, readFileSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { transform } from 'esbuild'

const { compilerOptions } = JSON.parse(readFileSync(new URL('../../tsconfig.json', import.meta.url), 'utf8'))

/** A relative import of `./x.js` from a TypeScript file is `./x.ts` when that exists, as in tsc's NodeNext resolution. */
export async function resolve (specifier, context, next) {
  if (specifier.startsWith('.') && specifier.endsWith('.js') && context.parentURL?.endsWith('.ts')) {
    const url = new URL(`${specifier.slice(0, -3)}.ts`, context.parentURL)
    if (existsSync(fileURLToPath(url))) return { url: url.href, format: 'module', shortCircuit: true }
  }
  return await next(specifier, context)
}

/** A `.ts` file outside node_modules, compiled to an ES module with an inline source map that carries its source. */
export async function load (url, context, next) {
  if (!url.startsWith('file:') || !url.endsWith('.ts') || url.includes('/node_modules/')) return await next(url, context)
  const path = fileURLToPath(url)
  const { code } = await transform(await readFile(path, 'utf8'), {
    loader: 'ts',
    format: 'esm',
    target: `node${process.versions.node}`,
    tsconfigRaw: { compilerOptions },
    sourcemap: 'inline',
    sourcesContent: true,
    sourcefile: path
  })
  return { format: 'module', source: code, shortCircuit: true }
}
