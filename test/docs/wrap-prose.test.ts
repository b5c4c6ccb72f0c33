import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { wrapProse } from '../../bench/shared/wrap-prose.js'

/** The benchmark report's prose, wrapped (bench/shared/wrap-prose.js): the same document, narrower. */

t.test('a paragraph and a list item wrap at spaces, a list item\'s text continued under it', async t => {
  const paragraph = 'one two three four five six seven eight nine ten'
  t.equal(wrapProse(paragraph, 20), 'one two three four\nfive six seven eight\nnine ten')
  t.equal(wrapProse(`- **item**: ${paragraph}`, 24), '- **item**: one two\n  three four five six\n  seven eight nine ten')
  t.equal(wrapProse('12. a numbered item with more words', 16), '12. a numbered\n    item with\n    more words')
})

t.test('inline code is one word, and a longer word stays whole', async t => {
  t.equal(wrapProse('see `npm run bench -- --part http` now', 12), 'see\n`npm run bench -- --part http`\nnow')
  t.equal(wrapProse('a https://example.com/a/very/long/path b', 10), 'a\nhttps://example.com/a/very/long/path\nb')
})

t.test('no line begins with a word that would start a block', async t => {
  for (const marker of ['-', '+', '*', '#', '1.', '2)', '>x', '|', '<b>', '===', '```']) {
    const wrapped = wrapProse(`aaaa bbbb ${marker} cccc`, 9).split('\n')
    t.notOk(wrapped.slice(1).some(line => line.startsWith(marker)), `${marker} stays on the line before`)
  }
  t.equal(wrapProse('rates of 0.97x and 1.05x', 9), 'rates of\n0.97x and\n1.05x', 'a number is no list marker')
})

t.test('headings, tables, fenced code, HTML and images stay as they are', async t => {
  const long = 'word '.repeat(30).trim()
  for (const line of [`# ${long}`, `| ${long} |`, `<!-- ${long} -->`, `![${long}](chart.svg)`]) t.equal(wrapProse(line, 20), line)
  const fenced = ['```text', long, '```', long].join('\n')
  const out = wrapProse(fenced, 20).split('\n')
  t.same(out.slice(0, 3), ['```text', long, '```'], 'inside the fence')
  t.ok(out.slice(3).every(line => line.length <= 20), 'after it, wrapped')
})

t.test('docs/benchmarks.md is wrapped: its prose within 100 columns', async t => {
  const report = readFileSync(join(import.meta.dirname, '..', '..', 'docs', 'benchmarks.md'), 'utf8')
  t.equal(wrapProse(report), report, 'the generator wrote it wrapped')
  const prose = report.split('\n').filter(line => !/^(\||<|!\[)/.test(line))
  t.same(prose.filter(line => line.length > 100), [], 'no line of prose wider')
})
