import { findSourceMap } from 'node:module'
import t from 'tap'
import { refundedOn } from '../lib/http/ticket.js'

// tap's coverage maps V8's ranges to the lines of the TypeScript through tsx's source maps. tsx
// puts the sources in them only when NODE_V8_COVERAGE is set; without them, every range of a
// module lands on the few lines of tsx's whitespace-minified output, and a class nobody ever
// instantiated counts as covered: the 100% check passes whatever the tests leave out. `npm test`
// sets NODE_V8_COVERAGE (package.json); this test fails a run that measures coverage without it.
t.test('the coverage tap measures maps to the lines of the sources', async t => {
  if (process.env._TAPJS_PROCESSINFO_COVERAGE_ !== '1') {
    t.skip('tap measures no coverage in this run (--disable-coverage)')
    return
  }
  t.equal(refundedOn('rejected', 'accepted'), true, 'the module is loaded')
  const url = new URL('../lib/http/ticket.ts', import.meta.url).href
  const map = findSourceMap(url)
  t.ok(map, 'tsx gave the module a source map')
  t.type(map?.payload.sourcesContent?.[0], 'string', 'with its source in it: run the tests with npm test, which sets NODE_V8_COVERAGE')
})
