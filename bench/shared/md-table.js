// The Markdown tables of the benchmark report (bench/report.js and each part's report.js).

/**
 * A Markdown table of `header` and `rows`; `align` gives each column's alignment, 'l' or 'r'
 * (by default the first column left, the others right, as figures are).
 */
export function mdTable (header, rows, align) {
  const line = cells => `| ${cells.join(' | ')} |`
  const rule = header.map((_, i) => (align?.[i] ?? (i === 0 ? 'l' : 'r')) === 'l' ? ':--' : '--:')
  return [line(header), line(rule), ...rows.map(line)].join('\n')
}
