import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { needsNode, nodeMajor } from '../helpers/node.js'

/**
 * The Node versions the package is tested on: .ci/run runs the suite on the machine's Node and on
 * each of its NODE_MAJORS; package.json's engines and the README name the same lines.
 */

const repo = join(import.meta.dirname, '..', '..')
const ciRun = readFileSync(join(repo, '.ci', 'run'), 'utf8')
const engines = (JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')) as { engines: { node: string } }).engines.node
const readme = readFileSync(join(repo, 'README.md'), 'utf8')

t.test('a test knows which Node it runs on, and one that needs a later Node says why it skips', async t => {
  t.equal(nodeMajor, Number(/^v(\d+)\./.exec(process.version)![1]))
  t.equal(needsNode(nodeMajor), false, 'runs on this Node')
  t.equal(needsNode(nodeMajor - 1), false, 'and on one that needs less')
  t.match(needsNode(nodeMajor + 1), new RegExp(`^needs Node ${nodeMajor + 1} or later, this is ${process.version.replace(/\./g, '\\.')}`))
})

t.test('engines and the README name the Node lines CI tests: the machine\'s 20 and .ci/run\'s others', async t => {
  const majors = /^NODE_MAJORS="([\d ]+)"$/m.exec(ciRun)![1].split(' ').map(Number)
  t.same(majors, [22, 24])
  const tested = [20, ...majors]
  t.same(engines.split(' || ').map(range => Number(/^\^(\d+)\./.exec(range)![1])), tested, `engines: ${engines}`)
  t.match(readme, `Tested on Node 20 (from 20.19), ${majors.slice(0, -1).join(', ')} and ${majors.at(-1)}: CI runs the suite on each.`)
  t.ok(tested.includes(nodeMajor), `this Node, ${process.version}, is one of them`)
})
