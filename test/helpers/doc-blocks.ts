import { readFileSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import ts from 'typescript'

/**
 * The code blocks of the documentation, checked like code (test/docs/docs.test.ts).
 *
 * A fence's info string says what a block is:
 * - `ts` or `js`: a complete example, type-checked under strict TypeScript against the built
 *   package (`import ... from 'exchangepace'` resolves through the package's self-reference to
 *   dist/), `js` with checkJs. Each block is a module of its own, so top-level await works.
 * - `ts fragment` or `js fragment`: part of an example, highlighted and not checked.
 * - `prelude=a,b` after `ts` or `js`: the block uses, undeclared, what test/doc-preludes/a.ts and
 *   b.ts export (an `app`, the app's own `authenticateClient`...): the checker imports those names.
 * - any other language (`sh`, `json`, `text`...): not code to check. A fence must name one, and a
 *   TypeScript or JavaScript block must say `ts` or `js`: `typescript`, `mjs` and the like are
 *   refused, so that no block escapes the check by its spelling.
 */

export interface DocBlock {
  /** The Markdown file, relative to the repository. */
  readonly file: string
  /** The line of the opening fence (1-based). */
  readonly line: number
  readonly lang: string
  readonly fragment: boolean
  readonly preludes: readonly string[]
  readonly code: string
}

/** Languages that are JavaScript or TypeScript under another name: a block must say `ts` or `js`. */
const ALIASES = new Set(['typescript', 'javascript', 'mjs', 'cjs', 'mts', 'cts', 'tsx', 'jsx', 'node'])

const repo = join(import.meta.dirname, '..', '..')
const PRELUDES = join(repo, 'test', 'doc-preludes')

/** The fenced blocks of `markdown` (the file `file`), or a problem with a fence's info string. */
export function extractBlocks (file: string, markdown: string): { blocks: DocBlock[], problems: string[] } {
  const blocks: DocBlock[] = []
  const problems: string[] = []
  const lines = markdown.split('\n')
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,}|~{3,})(.*)$/.exec(lines[i])
    if (open === null) continue
    const [, indent, fence, info] = open
    const closing = new RegExp(`^\\s*${fence[0]}{${fence.length},}\\s*$`)
    const end = lines.findIndex((text, j) => j > i && closing.test(text))
    const close = end === -1 ? lines.length : end
    const code = lines.slice(i + 1, close).map(text => text.startsWith(indent) ? text.slice(indent.length) : text).join('\n')
    const block = parseInfo(file, i + 1, info.trim(), code, problems)
    if (block !== null) blocks.push(block)
    i = close
  }
  return { blocks, problems }
}

/** A block from its fence's info string; null, with the problem noted, when the info string is not one of the convention's. */
function parseInfo (file: string, line: number, info: string, code: string, problems: string[]): DocBlock | null {
  const [lang = '', ...words] = info.split(/\s+/).filter(word => word !== '')
  const where = `${file}:${line}`
  if (lang === '') {
    problems.push(`${where}: a fence names its language (ts, js, sh, json, text...)`)
    return null
  }
  if (ALIASES.has(lang.toLowerCase())) {
    problems.push(`${where}: write \`ts\` or \`js\` (with \`fragment\` for a part of an example), not \`${lang}\``)
    return null
  }
  const checked = lang === 'ts' || lang === 'js'
  let fragment = false
  const preludes: string[] = []
  for (const word of words) {
    if (checked && word === 'fragment') fragment = true
    else if (checked && word.startsWith('prelude=')) preludes.push(...word.slice('prelude='.length).split(','))
    else problems.push(`${where}: unknown word \`${word}\` in the fence (after ts or js: \`fragment\` or \`prelude=NAME\`)`)
  }
  return { file, line, lang, fragment, preludes, code }
}

/** Whether the checker type-checks `block`. */
export function isChecked (block: DocBlock): boolean {
  return (block.lang === 'ts' || block.lang === 'js') && !block.fragment
}

/** The values a prelude exports, read from its source (`export const`, `export declare function`...): its types are its own. */
function preludeExports (name: string): string[] {
  const source = readFileSync(join(PRELUDES, `${name}.ts`), 'utf8')
  return [...source.matchAll(/^export (?:declare )?(?:async )?(?:const|let|function|class) (\w+)/gm)].map(match => match[1])
}

/** The compiler options a block is checked with: strict, as a user's project on Node would be. */
export const CHECK_OPTIONS: ts.CompilerOptions = {
  target: ts.ScriptTarget.ES2022,
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  strict: true,
  exactOptionalPropertyTypes: true,
  noEmit: true,
  allowJs: true,
  checkJs: true,
  skipLibCheck: true,
  types: ['node']
}

/**
 * Type-checks `blocks` in one program and returns each block's errors as `file:line:column
 * message`, keyed by the block (a block without errors has none). Each block is a file of its own,
 * held in memory in a folder of the repository, so that `exchangepace` resolves to the package
 * itself; a prelude it names is imported on a first line of its own.
 */
export function checkBlocks (blocks: readonly DocBlock[], compiler: typeof ts = ts): Map<DocBlock, string[]> {
  const folder = join(repo, '.doc-blocks')
  const sources = new Map<string, { block: DocBlock, offset: number }>()
  const texts = new Map<string, string>()
  for (const [i, block] of blocks.entries()) {
    const path = join(folder, `${i}-${block.file.replace(/\W/g, '_')}-${block.line}.${block.lang}`)
    const imports = block.preludes.map(name => {
      const from = relative(dirname(path), join(PRELUDES, `${name}.js`))
      return `import { ${preludeExports(name).join(', ')} } from '${from}'`
    })
    texts.set(path, [...imports, block.code].join('\n'))
    sources.set(path, { block, offset: imports.length })
  }
  const host = compiler.createCompilerHost(CHECK_OPTIONS)
  const { fileExists, readFile, getSourceFile } = host
  host.fileExists = path => texts.has(path) || fileExists.call(host, path)
  host.readFile = path => texts.get(path) ?? readFile.call(host, path)
  host.getSourceFile = (path, language, onError, create) => {
    const text = texts.get(path)
    return text === undefined ? getSourceFile.call(host, path, language, onError, create) : compiler.createSourceFile(path, text, language)
  }
  const program = compiler.createProgram([...texts.keys()], CHECK_OPTIONS, host)
  const errors = new Map<DocBlock, string[]>(blocks.map(block => [block, []]))
  for (const diagnostic of compiler.getPreEmitDiagnostics(program)) {
    const { file, start } = diagnostic
    const source = file === undefined ? undefined : sources.get(file.fileName)
    const message = compiler.flattenDiagnosticMessageText(diagnostic.messageText, '\n')
    if (file === undefined || source === undefined || start === undefined) throw new Error(`docs: outside any block: ${message}`)
    const { line, character } = file.getLineAndCharacterOfPosition(start)
    const where = line < source.offset ? `${source.block.file}:${source.block.line} (prelude)` : `${source.block.file}:${source.block.line + 1 + line - source.offset}:${character + 1}`
    errors.get(source.block)!.push(`${where} TS${diagnostic.code}: ${message}`)
  }
  return errors
}
