import t from 'tap'
import { Pace } from '../lib/pace.js'

t.test('a full bucket grants floor(rate) at one instant', async t => {
  let now = 0
  const pace = new Pace({ perSecond: 10, now: () => now })
  let granted = 0
  for (let i = 0; i < 100; i++) if (pace.reserve('k').granted) granted++
  t.equal(granted, 10)
  now = 100
  t.ok(pace.reserve('k').granted)
})
