// Wraps the report's prose to a readable width (bench/report.js): the parts write each paragraph
// on one line, and a reader of the Markdown source should not scroll sideways through it.

/**
 * A word that would change what a line means if it began one: a list item's marker, a heading's,
 * a setext underline, a quote, a table row, HTML, a fence.
 */
const BLOCK_MARKER = /^([-+*]|#{1,6}|\d{1,9}[.)]|[=-]+)$|^([>|<]|```|~~~)/

/**
 * `markdown` with every line of prose longer than `width` broken at spaces into lines of at most
 * `width` where its words allow (a longer word stays whole), continued under a list item's text.
 * Headings, table rows, fenced code, HTML and images stay as they are, and no break falls inside
 * inline code or before a word that would start a block, so the rendered document is the same.
 */
export function wrapProse (markdown, width = 100) {
  let fenced = false
  return markdown.split('\n').map(line => {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced
    if (fenced || line.length <= width || /^\s*(```|~~~|#|\||<|!\[)/.test(line)) return line
    return wrapLine(line, width)
  }).join('\n')
}

/** One line of prose as several; continuation lines are indented to the text of a list item. */
function wrapLine (line, width) {
  const lead = /^\s*(?:[-+*] |\d+[.)] )?/.exec(line)[0]
  const indent = ' '.repeat(lead.length)
  // A word: a run of anything but spaces, where inline code (spaces and all) counts as one piece.
  const words = line.slice(lead.length).match(/(?:`[^`]*`|[^\s`]|`)+/g)
  const lines = []
  let current = lead + words[0]
  for (const word of words.slice(1)) {
    if (current.length + 1 + word.length <= width || BLOCK_MARKER.test(word)) current += ` ${word}`
    else {
      lines.push(current)
      current = indent + word
    }
  }
  lines.push(current)
  return lines.join('\n')
}
