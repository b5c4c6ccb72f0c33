import t from 'tap'
import exchangePace, { Pace } from 'exchangepace'
import { createRequire } from 'node:module'
import * as source from '../../lib/index.js'

t.test('the package imports itself by name through its exports map', async t => {
  t.equal(typeof exchangePace, 'function')
  t.equal(typeof Pace, 'function')
  t.equal(typeof source.Pace, 'function')
})

t.test('CommonJS loads it with require, where Node loads ES modules so', async t => {
  const loaded = createRequire(import.meta.url)('exchangepace') as typeof source
  t.equal(loaded.default, exchangePace)
  t.equal(typeof loaded.RedisStore, 'function')
})
