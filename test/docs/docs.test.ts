import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import ts from 'typescript'
import ts5 from 'typescript5'
import { checkBlocks, extractBlocks, isChecked, type DocBlock } from '../helpers/doc-blocks.js'

/**
 * The documentation's code, tested like code: every `ts` and `js` block of README.md and docs/*.md
 * is type-checked under strict TypeScript, 6.x (the project's) and 5.x (`typescript5`, an alias in
 * devDependencies), against the built package (`npm test` builds it first), all of them in one
 * program per compiler; fragments (`ts fragment`) and other languages are not. The fence
 * convention is in test/helpers/doc-blocks.ts and in the README's Contributing section. Blocks
 * written wrong on purpose go into the same program, so that the check is seen to catch a
 * misspelt option, and cost no compilation of their own.
 */

// Two whole TypeScript programs, each compiled twice: a minute on a quiet machine, more on a busy one.
t.setTimeout(300_000)

const repo = join(import.meta.dirname, '..', '..')
const FILES = ['README.md', ...readdirSync(join(repo, 'docs')).filter(name => name.endsWith('.md')).sort().map(name => `docs/${name}`)]

const documented = FILES.map(file => extractBlocks(file, readFileSync(join(repo, file), 'utf8')))
const blocks = documented.flatMap(doc => doc.blocks).filter(isChecked)

/** Blocks that must fail the check, each with what its error must say. */
const WRONG: Array<[string, string, RegExp]> = [
  ['a misspelt route option', `\`\`\`ts
import Fastify from 'fastify'
import exchangePace from 'exchangepace'

const app = Fastify()
await app.register(exchangePace)
app.post('/token', { config: { pace: { perSecnd: 5, key: 'client', spend: 'accepted' } } }, async () => 'ok')
\`\`\``, /TS2\d+: [^]*perSecnd/],
  ['a misspelt plugin option, in JavaScript', `\`\`\`js prelude=app
import exchangePace from 'exchangepace'

await app.register(exchangePace, { logClientId: true })
\`\`\``, /TS2\d+: [^]*'logClientId' does not exist/],
  ['a misspelt member of request.pace', `\`\`\`ts prelude=app
app.post('/token', { config: { pace: { perSecond: 5, key: 'client', spend: 'accepted' } } }, async (request) => {
  request.pace.outcom = 'rejected'
})
\`\`\``, /TS2\d+: [^]*'outcom' does not exist/],
  ['a wrong value', `\`\`\`js prelude=app
app.get('/authorize', { config: { pace: { perSecond: 10, key: 'source', spend: 'always' } } }, async () => 'ok')
\`\`\``, /TS2\d+: Type '"always"' is not assignable to [^]*spend must be 'accepted', 'rejected' or 'every'/],
  ['a name no prelude gives', `\`\`\`ts prelude=app
app.post('/token', { config: { pace: { perSecond: 5, key: 'client', spend: 'accepted' } } }, async (request) => authenticateClient(request))
\`\`\``, /TS2304: Cannot find name 'authenticateClient'/]
]

const wrong = WRONG.map(([name, markdown, expected]) => ({ name, expected, block: extractBlocks(`(${name})`, markdown).blocks[0] }))
const compilers = [ts, ts5].map(compiler => ({ version: compiler.version, errors: checkBlocks([...blocks, ...wrong.map(w => w.block)], compiler) }))

t.test('the blocks are checked by TypeScript 6 and 5', async t => {
  t.match(compilers.map(compiler => compiler.version), [/^6\./, /^5\./])
})

t.test('every fence of README.md and docs/*.md follows the convention', async t => {
  t.same(documented.flatMap(doc => doc.problems), [])
  t.ok(blocks.length >= 8, `${blocks.length} blocks checked`)
})

t.test('every checked block of README.md and docs/*.md compiles under strict TypeScript', async t => {
  for (const { version, errors } of compilers) {
    for (const block of blocks) t.same(errors.get(block), [], `${block.file}:${block.line} (${block.lang}), TypeScript ${version}`)
  }
})

t.test('a block written wrong fails the check, at its line in the Markdown', async t => {
  for (const { version, errors } of compilers) {
    for (const { name, expected, block } of wrong) {
      const found = errors.get(block)!
      t.match(found.join('\n'), expected, `${name}, TypeScript ${version}`)
      t.match(found[0], new RegExp(`^\\(${name}\\):\\d+:\\d+ TS`), 'located in its file')
    }
  }
})

t.test('docs/reference.md names every export of the published package in its table of exports', async t => {
  const entry = join(repo, 'dist', 'index.d.ts')
  const program = ts.createProgram([entry], { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, types: [] })
  const checker = program.getTypeChecker()
  const exported = checker.getExportsOfModule(checker.getSymbolAtLocation(program.getSourceFile(entry)!)!).map(symbol => symbol.name).filter(name => name !== 'default')
  const reference = readFileSync(join(repo, 'docs', 'reference.md'), 'utf8')
  const table = reference.slice(reference.indexOf('| export | what it is |'), reference.indexOf('## Limits, in detail'))
  const named = new Set([...table.matchAll(/^\| ([^|]+) \|/gm)].flatMap(row => [...row[1].matchAll(/`(\w+)`/g)].map(match => match[1])))
  t.ok(exported.length >= 30, `${exported.length} exports`)
  t.same(exported.filter(name => !named.has(name)), [], 'every export has a row')
  t.same([...named].filter(name => !exported.includes(name) && name !== 'export'), [], 'and every row an export')
})

t.test('fences: a fragment, another language, and what the convention refuses', async t => {
  const markdown = [
    '```ts fragment', 'request.pace.outcome = "rejected" // a part of an example', '```',
    '```sh', 'npm test', '```',
    '````js', 'const fence = "```"', '````',
    '  ```ts', '  const indented = 1', '  ```',
    '```', 'no language', '```',
    '```typescript', 'let x = 1', '```',
    '```ts fragmnet', '```',
    '```json prelude=app', '{}', '```'
  ].join('\n')
  const { blocks, problems } = extractBlocks('x.md', markdown)
  const shape = (block: DocBlock) => [block.line, block.lang, block.fragment, isChecked(block), block.code]
  t.same(blocks.map(shape), [
    [1, 'ts', true, false, 'request.pace.outcome = "rejected" // a part of an example'],
    [4, 'sh', false, false, 'npm test'],
    [7, 'js', false, true, 'const fence = "```"'],
    [10, 'ts', false, true, 'const indented = 1'],
    [19, 'ts', false, true, ''],
    [21, 'json', false, false, '{}']
  ])
  t.same(problems, [
    'x.md:13: a fence names its language (ts, js, sh, json, text...)',
    'x.md:16: write `ts` or `js` (with `fragment` for a part of an example), not `typescript`',
    'x.md:19: unknown word `fragmnet` in the fence (after ts or js: `fragment` or `prelude=NAME`)',
    'x.md:21: unknown word `prelude=app` in the fence (after ts or js: `fragment` or `prelude=NAME`)'
  ])
})
