// tap's coverage map: which files each test file is held to covering. The benchmark's smoke test
// (test/bench/bench.test.ts) runs bench/ only to keep it from rotting; bench/ is a tool, not the
// package, so that test adds no coverage. Every other test counts toward the package: lib/ and
// examples/ (named here, so that a test importing a bench helper, as test/redis/plugin.test.ts
// does, does not bring bench/ into the check), but the demo's script (examples/demo*.js), which
// test/examples/demo.test.ts checks by what it prints, in this process and as
// `node examples/demo.js`: V8's counts for it from the two runs did not add up to what ran
// (branches every case of which the test checks came out as never run), so its coverage is not held
// to 100%.
import { readdirSync } from 'node:fs'

const PACKAGE = ['lib', 'examples'].flatMap(dir => readdirSync(dir, { recursive: true, withFileTypes: true })
  .filter(entry => entry.isFile() && !/^demo.*\.js$/.test(entry.name))
  .map(entry => `${entry.parentPath}/${entry.name}`))

export default function coverageMap (testFile) {
  return testFile.endsWith('bench.test.ts') ? null : PACKAGE
}
