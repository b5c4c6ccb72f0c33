// tap's coverage map: which files each test file is held to covering. The benchmark's smoke test
// (test/bench.test.ts) runs bench/ only to keep it from rotting; bench/ is a tool, not the package,
// so that test adds no coverage. Every other test counts toward the package: lib/ and examples/
// (named here, so that a test importing a bench helper, as test/redis-plugin.test.ts does, does
// not bring bench/ into the check).
import { readdirSync } from 'node:fs'

const PACKAGE = ['lib', 'examples'].flatMap(dir => readdirSync(dir, { recursive: true, withFileTypes: true })
  .filter(entry => entry.isFile())
  .map(entry => `${entry.parentPath}/${entry.name}`))

export default function coverageMap (testFile) {
  return testFile.endsWith('bench.test.ts') ? null : PACKAGE
}
