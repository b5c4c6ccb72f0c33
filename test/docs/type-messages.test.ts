import t from 'tap'
import ts from 'typescript'
import ts5 from 'typescript5'
import { checkBlocks, type DocBlock } from '../helpers/doc-blocks.js'
import { paceRules } from '../../lib/http/route-config.js'

/**
 * What the compiler tells a user who mistypes a single-object `config.pace` (lib/http/pace-config.ts):
 * the field, and what it takes; never the array's methods. Each snippet is compiled against the built
 * package under strict TypeScript 6 and 5, in one program per compiler (test/helpers/doc-blocks.ts),
 * and the message read.
 */

const PRELUDE = `import Fastify from 'fastify'
import exchangePace from 'exchangepace'
const app = Fastify()
await app.register(exchangePace)
const handler = async () => 'ok'
`

/** The fields of a pace, as the route's runtime check lists them: the compiler's message lists the same. */
const FIELDS = /\(([^)]+)\)$/.exec(thrown(() => paceRules({ perSecond: 1, key: 'client', spend: 'every', nmae: 'x' }, 'POST /token', '/token')))![1]

function thrown (fn: () => unknown): string {
  try {
    fn()
  } catch (err) {
    return (err as Error).message
  }
  throw new Error('did not throw')
}
const KEYS = "'client', 'source', \\['client', 'source'\\], 'device_code', 'bearer' or a function \\(request\\) => string \\| undefined"

/** A route's pace as written, and what the message must say. */
const CASES: Array<[string, string, RegExp]> = [
  ['a misspelt name', "{ perSecond: 5, key: 'client', spend: 'accepted', nmae: 'x' }", new RegExp(`nmae is not a field of a pace: ${FIELDS}`)],
  ['a misspelt rateOf', "{ perSecond: 5, key: 'client', spend: 'accepted', rateof: () => 1 }", new RegExp(`rateof is not a field of a pace: ${FIELDS}`)],
  ['a misspelt exceptGrantTypes', "{ perSecond: 5, key: 'client', spend: 'accepted', exceptGrantType: ['urn:x'] }", new RegExp(`exceptGrantType is not a field of a pace: ${FIELDS}`)],
  ['a wrong spend', "{ perSecond: 5, key: 'client', spend: 'acepted' }", /Type '"acepted"' is not assignable to [^]*spend must be 'accepted', 'rejected' or 'every'/],
  ['a wrong key', "{ perSecond: 5, key: 'clinet', spend: 'accepted' }", new RegExp(`Type '"clinet"' is not assignable to [^]*key must be ${KEYS}`)],
  ['a pair written the other way round', "{ limit: 5, window: 3600, key: ['source', 'client'], spend: 'rejected' }", new RegExp(`key must be ${KEYS}`)],
  ['a rate that is not a number', "{ perSecond: '5', key: 'client', spend: 'accepted' }", /perSecond must be a number of units per second/],
  ['a misspelt field in the array form', "[{ perSecond: 5, key: 'client', spend: 'accepted', nmae: 'x' }]", /'nmae' does not exist in type/]
]

const block = (name: string, code: string): DocBlock => ({ file: `(${name})`, line: 0, lang: 'ts', fragment: false, preludes: [], code })
const wrong = CASES.map(([name, pace, expected]) => ({ name, expected, block: block(name, `${PRELUDE}app.post('/token', { config: { pace: ${pace} } }, handler)`) }))
const right = block('right', `${PRELUDE}app.post('/token', { config: { pace: { limit: 5, window: 3600, key: ['client', 'source'], spend: 'rejected', name: 'budget', rateOf: () => undefined, exceptGrantTypes: ['urn:x'], refusal: { statusCode: 429 } } } }, handler)
app.post('/authorize', { config: { pace: { perSecond: 10, key: (request) => request.ip, spend: 'every' } } }, handler)
app.post('/both', { config: { pace: [{ perSecond: 5, key: 'client', spend: 'accepted' }, { perSecond: 50, key: 'source', spend: 'every' }] } }, handler)`)

for (const compiler of [ts, ts5]) {
  t.test(`TypeScript ${compiler.version}`, async t => {
    const errors = checkBlocks([right, ...wrong.map(w => w.block)], compiler)
    t.same(errors.get(right), [], 'every field written right compiles, in both forms')
    for (const { name, expected, block } of wrong) {
      const found = errors.get(block)!.join('\n')
      t.match(found, expected, name)
      t.notMatch(found, /length, concat|missing the following properties from type 'readonly/, `${name}: not reported against the array form`)
    }
  })
}
