import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'

/**
 * The docs say each thing one way: sentences that were superseded (and contradicted what the code
 * does, or another page) stay out, the README defines its words before it uses them and says where
 * each question is answered, and the pages written for users cite no internal issue numbers.
 */

const repo = join(import.meta.dirname, '..', '..')
const read = (file: string) => readFileSync(join(repo, file), 'utf8')
const DOCS = readdirSync(join(repo, 'docs')).filter(name => name.endsWith('.md')).sort().map(name => `docs/${name}`)
const ALL = ['README.md', 'CHANGELOG.md', ...DOCS]
/** The pages for maintainers, which may tell the project's history. */
const MAINTAINERS = ['docs/design.md', 'docs/benchmark-history.md']
const readme = read('README.md')

/** Superseded sentences, each with what replaced it. */
const SUPERSEDED: Array<[RegExp, string]> = [
  [/`t=` on a grant is the window/, 'a grant\'s `t` is the time until the bucket is full (lib/http/quota-headers.ts)'],
  [/`t` in the RateLimit header is the window on a grant/, 'the same'],
  [/a grant's states the window/, 'the same'],
  [/cannot give one key a rate of its own/, '`rateOf` gives it one'],
  [/made-up client ids that leaves no row(?! keyed)/, 'with `isClient` such a flood leaves a row per address in the per-source budget'],
  [/"\/token#client";(q=5;w=1`, and `r=4|r=\d+);t=720/, 'the client pace\'s item never waits a failure budget\'s 720 s'],
  [/about an hour; `--part NAME`/, '`npm run bench` takes more than two hours'],
  [/about 63 bytes a key/, 'the heap per key is stated once, in the README\'s benchmark table']
]

t.test('no page says what was superseded', async t => {
  for (const file of ALL) {
    const text = read(file).replace(/\s*\n\s*/g, ' ')
    for (const [sentence, instead] of SUPERSEDED) t.notMatch(text, sentence, `${file}: ${instead}`)
  }
})

t.test('the README says each thing once', async t => {
  const count = (pattern: RegExp) => readme.match(new RegExp(pattern, 'g'))?.length ?? 0
  t.equal(count(/N replicas admit/), 1, 'that the rate is per replica')
  t.equal(count(/fastify\.pace\.inspect/), 1, 'the operator\'s API')
  t.equal(count(/63 B/), 1, 'the heap per key')
  t.match(readme, /npm run bench` runs the benchmarks\s+\(more than two hours/)
  t.match(read('docs/benchmarks.md'), /`npm run bench` runs every part, in more than two hours/, 'as the benchmark report says')
})

t.test('the recommended set-up declares in its code every pace its prose names', async t => {
  const setUp = readme.slice(readme.indexOf('## The recommended set-up'), readme.indexOf('## Options'))
  const code = setUp.slice(setUp.indexOf('```ts'), setUp.indexOf('```\n', setUp.indexOf('```ts') + 5))
  for (const pace of [
    "{ limit: 5, window: 3600, key: ['client', 'source'], spend: 'rejected' }",
    "{ limit: 100, window: 86400, key: 'source', spend: 'rejected' }",
    "{ perSecond: 5, key: 'client', spend: 'accepted' }",
    "{ perSecond: 50, key: 'source', spend: 'every' }",
    "{ perSecond: 10, key: 'source', spend: 'every' }"
  ]) t.ok(code.includes(pace), pace)
  t.match(code, /isClient: id => clients\.has\(id\)/)
})

t.test('the README defines its five words before its first code, as docs/design.md does', async t => {
  const opening = readme.slice(0, readme.indexOf('```'))
  const words = read('docs/design.md').slice(0, read('docs/design.md').indexOf('## The bucket'))
  for (const word of ['pace', 'key', 'unit', 'spend', 'failure budget']) {
    t.match(opening, new RegExp(`^- \\*\\*${word}\\*\\*: `, 'm'), `README: ${word}`)
    t.match(words, new RegExp(`^- \\*\\*${word}\\*\\*: `, 'm'), `docs/design.md: ${word}`)
  }
  t.match(readme, /npm install exchangepace @fastify\/formbody/, 'the install line names what the first block imports')
})

t.test('the README\'s index names every page of docs/, the maintainers\' marked', async t => {
  const index = readme.slice(readme.indexOf('## Docs'), readme.indexOf('\n## ', readme.indexOf('## Docs') + 1))
  const rows = index.split('\n').filter(line => line.startsWith('| ') && !line.startsWith('| question'))
  for (const file of [...DOCS, 'CHANGELOG.md']) {
    const row = rows.find(line => line.includes(`/blob/main/${file})`))
    t.ok(row, `${file} has a row`)
    t.equal(row?.includes('(maintainers\' reading)'), MAINTAINERS.includes(file), `${file}: for maintainers, or not`)
  }
})

t.test('pages for users cite no internal issue numbers; the maintainers\' say what an issue was', async t => {
  for (const file of ALL.filter(file => !MAINTAINERS.includes(file))) {
    t.notMatch(read(file).replace(/\s*\n\s*/g, ' '), /\bissues? \d+|the issue's/i, file)
  }
  for (const file of MAINTAINERS) t.notMatch(read(file), /\bissue \d+'s (\w+ )?item\b/i, file)
})
