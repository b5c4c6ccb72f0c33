// tap's coverage map: which files each test file is held to covering. The benchmark's smoke test
// (test/bench.test.ts) runs bench/ only to keep it from rotting; bench/ is a tool, not the package,
// so that test adds no coverage. Every other test counts toward the usual set (lib/ and examples/).
export default function coverageMap (testFile) {
  return testFile.endsWith('bench.test.ts') ? null : []
}
