import t from 'tap'
import { execFileSync, spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'

/**
 * The package as a user gets it from the registry: what `npm pack` puts in the tarball (the build
 * `npm test` has just made), what installing that tarball prints, and whether the README's links
 * work where the registry shows it, beside the repository. publint checks the rest (`npm run
 * lint:package`, in `npm test`).
 */

const repo = join(import.meta.dirname, '..', '..')
const manifest = JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')) as {
  name: string
  version: string
  scripts: Record<string, string>
  repository: { type: string, url: string }
  homepage: string
  bugs: { url: string }
}
/** The repository's address on the web, from package.json. */
const web = manifest.repository.url.replace(/^git\+/, '').replace(/\.git$/, '')

function npm (args: string[], cwd = repo): string {
  return execFileSync('npm', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })
}

t.test('the tarball holds the build, the README, the licence and package.json, and nothing else', async t => {
  const [packed] = JSON.parse(npm(['pack', '--dry-run', '--json', '--ignore-scripts'])) as Array<{ files: Array<{ path: string }> }>
  const files = packed.files.map(file => file.path).sort()
  const built = readdirSync(join(repo, 'dist'), { recursive: true, withFileTypes: true })
    .filter(entry => entry.isFile() && !entry.name.endsWith('.map'))
    .map(entry => relative(repo, join(entry.parentPath, entry.name)))
  t.same(files, ['LICENSE', 'README.md', ...built, 'package.json'].sort())
  t.ok(files.includes('dist/index.d.ts') && files.includes('dist/operator/bin.js'), 'the entry point, its types and the CLI')
})

t.test('package.json says where the project lives, and builds when packed, not when installed', async t => {
  t.match(web, /^https:\/\/github\.com\/[\w.-]+\/[\w.-]+$/)
  t.equal(manifest.homepage, `${web}#readme`)
  t.equal(manifest.bugs.url, `${web}/issues`)
  t.equal(manifest.scripts.prepack, 'npm run build')
  for (const script of ['preinstall', 'install', 'postinstall', 'prepare']) t.equal(manifest.scripts[script], undefined, `no ${script} script`)
})

t.test('installing the tarball prints no install-script warning, and the package loads', async t => {
  const folder = mkdtempSync(join(tmpdir(), 'exchangepace-pack-'))
  t.teardown(() => rmSync(folder, { recursive: true, force: true }))
  npm(['pack', '--ignore-scripts', '--pack-destination', folder])
  const app = join(folder, 'app')
  execFileSync('mkdir', [app])
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true, type: 'module' }))
  // From the cache where it can: `npm ci` filled it with tarballs, but the dependencies' metadata,
  // which an install by name needs, may not be there on a fresh machine. The peers (fastify,
  // ioredis) are the app's to install.
  const install = spawnSync('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--legacy-peer-deps', join(folder, `${manifest.name}-${manifest.version}.tgz`)], { cwd: app, encoding: 'utf8' })
  t.equal(install.status, 0, install.stderr)
  t.notMatch(install.stderr, /warn/i, 'npm warned of nothing')
  const loaded = execFileSync(process.execPath, ['--input-type=module', '-e', "const m = await import('exchangepace'); console.log(typeof m.default, typeof m.RedisStore)"], { cwd: app, encoding: 'utf8' })
  t.equal(loaded.trim(), 'function function')
})

t.test('the README\'s links work on the package\'s page: absolute, to files of the repository', async t => {
  const readme = readFileSync(join(repo, 'README.md'), 'utf8')
  const links = [...readme.matchAll(/\]\(([^)\s]+)\)/g)].map(match => match[1])
  const inRepository = links.filter(link => link.startsWith(`${web}/blob/main/`))
  t.same(links.filter(link => !link.startsWith('#') && !/^https:\/\//.test(link)), [], 'no relative link but to the README\'s own headings')
  t.ok(inRepository.length >= 10, `${inRepository.length} links into the repository`)
  for (const link of inRepository) {
    const [path, anchor] = link.slice(`${web}/blob/main/`.length).split('#')
    t.ok(existsSync(join(repo, path)), `${path} exists`)
    if (anchor !== undefined) t.ok(headings(readFileSync(join(repo, path), 'utf8')).includes(anchor), `${path} has a heading #${anchor}`)
  }
  for (const link of links.filter(link => link.startsWith('#'))) t.ok(headings(readme).includes(link.slice(1)), `the README has a heading ${link}`)
})

/** The anchors of a Markdown file's headings, as GitHub makes them: lower case, punctuation dropped, spaces as hyphens. */
function headings (markdown: string): string[] {
  return [...markdown.matchAll(/^#+ (.+)$/gm)].map(match => match[1].toLowerCase().replace(/[^\w\- ]/g, '').replace(/ /g, '-'))
}
