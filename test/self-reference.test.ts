import t from 'tap'
import exchangePace, { Pace } from 'exchangepace'
import * as source from '../lib/index.js'

t.test('the package imports itself by name through its exports map', async t => {
  t.equal(typeof exchangePace, 'function')
  t.equal(typeof Pace, 'function')
  t.equal(typeof source.Pace, 'function')
})
