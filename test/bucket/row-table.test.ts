import t from 'tap'
import { RowTable } from '../../lib/bucket/row-table.js'

/** A table holding `count` keys `k0`, `k1`, ... with `k<i>` holding `i`, counted at time `i`. */
function tableOf (count: number): RowTable {
  const table = new RowTable()
  for (let i = 0; i < count; i++) table.insert(`k${i}`, i, i)
  return table
}

/** The value of every key `k0` .. `k<count - 1>` that has a row, in order. */
function valuesOf (table: RowTable, count: number): number[] {
  const values: number[] = []
  for (let i = 0; i < count; i++) {
    const row = table.row(`k${i}`)
    if (row !== -1) values.push(table.read(row))
  }
  return values
}

t.test('a new table is empty, with MIN_ROWS rows', async t => {
  const table = new RowTable()
  t.equal(RowTable.MIN_ROWS, 16)
  t.equal(table.size, 0)
  t.equal(table.capacity, RowTable.MIN_ROWS)
  t.equal(table.row('absent'), -1)
})

t.test('an inserted key has a row holding its value', async t => {
  const table = new RowTable()
  table.insert('a', 1.5, 0)
  const row = table.row('a')
  t.not(row, -1)
  t.equal(table.read(row), 1.5)
  t.equal(table.size, 1)
})

t.test('keys hold distinct rows and values', async t => {
  const table = new RowTable()
  table.insert('a', 1, 0)
  table.insert('b', 2, 0)
  t.not(table.row('a'), table.row('b'))
  t.equal(table.read(table.row('a')), 1)
  t.equal(table.read(table.row('b')), 2)
})

t.test('write replaces the value of one row only', async t => {
  const table = new RowTable()
  table.insert('a', 1, 0)
  table.insert('b', 2, 0)
  table.write(table.row('a'), 1e15 + 0.5)
  t.equal(table.read(table.row('a')), 1e15 + 0.5)
  t.equal(table.read(table.row('b')), 2)
  t.equal(table.size, 2)
})

t.test('remove deletes the key and leaves the others', async t => {
  const table = new RowTable()
  table.insert('a', 1, 0)
  table.insert('b', 2, 0)
  table.remove('a', table.row('a'))
  t.equal(table.row('a'), -1)
  t.equal(table.size, 1)
  t.equal(table.read(table.row('b')), 2)
})

t.test('a removed key can be inserted again', async t => {
  const table = new RowTable()
  table.insert('a', 1, 0)
  table.remove('a', table.row('a'))
  table.insert('a', 7, 0)
  t.equal(table.read(table.row('a')), 7)
  t.equal(table.size, 1)
})

t.test('a freed row is reused before any unused one', async t => {
  const table = new RowTable()
  table.insert('a', 1, 0)
  table.insert('b', 2, 0)
  const freed = table.row('a')
  table.remove('a', freed)
  table.insert('c', 3, 0)
  t.equal(table.row('c'), freed)
  t.equal(table.read(table.row('b')), 2)
})

t.test('the array doubles when every row is live', async t => {
  // Each row: keys inserted, capacity after.
  const table: Array<[number, number]> = [
    [16, 16],
    [17, 32],
    [32, 32],
    [33, 64],
    [1000, 1024]
  ]
  for (const [count, capacity] of table) {
    t.equal(tableOf(count).capacity, capacity, `${count} keys`)
  }
})

t.test('growing keeps every key and its value', async t => {
  const table = tableOf(100)
  t.same(valuesOf(table, 100), Array.from({ length: 100 }, (_, i) => i))
})

t.test('the array does not grow while a freed row is there', async t => {
  const table = tableOf(16)
  table.remove('k3', table.row('k3'))
  table.insert('new', 99, 0)
  t.equal(table.capacity, 16)
  t.equal(table.size, 16)
})

t.test('rows freed in any order are all handed out again, last freed first, before the arrays grow', async t => {
  const table = tableOf(16) // every row live
  const freed = ['k9', 'k2', 'k14', 'k0'].map(key => {
    const row = table.row(key)
    table.remove(key, row)
    return row
  })
  for (let i = 0; i < 4; i++) table.insert(`n${i}`, 100 + i, 0)
  t.same([0, 1, 2, 3].map(i => table.row(`n${i}`)), [...freed].reverse())
  t.equal(table.capacity, 16, 'no growth while the free list held rows')
  t.same([0, 1, 2, 3].map(i => table.read(table.row(`n${i}`))), [100, 101, 102, 103], 'a reused row holds its new number, not a link')
  table.insert('one more', 200, 0)
  t.equal(table.capacity, 32, 'the free list is empty again: the next insert grows the arrays')
  t.equal(table.read(table.row('k5')), 5)
})

t.test('a record holds a run, a count and the time of the latest count beside its number', async t => {
  const table = new RowTable()
  const row = table.insert('a', 10, 3)
  t.equal(row, table.row('a'), 'insert returns the row')
  t.same([table.read(row), table.run(row), table.count(row), table.last(row)], [10, 1, 1, 3], 'a new record: the first run, count 1 at time 3')
  t.equal(table.addCount(row, 20, 5), 2)
  t.equal(table.addCount(row, 30, 7), 3)
  t.same([table.read(row), table.run(row), table.count(row), table.last(row)], [30, 1, 3, 7], 'counts keep the run')
  table.uncount(row, 25)
  t.same([table.read(row), table.count(row), table.last(row)], [25, 2, 7], 'uncount keeps the time of the latest count')
  table.restart(row, 40, 9)
  t.same([table.read(row), table.run(row), table.count(row), table.last(row)], [40, 2, 1, 9], 'a restart takes the next run')
})

t.test('no run is given twice, whichever key or row the record starts in', async t => {
  const table = new RowTable()
  const seen = new Set<number>()
  const a = table.insert('a', 1, 0)
  seen.add(table.run(a))
  table.remove('a', a)
  const b = table.insert('b', 1, 0) // the same row, from the free list
  t.equal(b, a)
  seen.add(table.run(b))
  table.restart(b, 2, 0)
  seen.add(table.run(b))
  for (let i = 0; i < 40; i++) seen.add(table.run(table.insert(`k${i}`, i, 0)))
  t.equal(seen.size, 43)
})

t.test('holds: a row and a run name one record until it is removed or moved', async t => {
  const table = new RowTable()
  const rows = Array.from({ length: 20 }, (_, i) => table.insert(`k${i}`, i, 0))
  const runs = rows.map(row => table.run(row))
  t.ok(table.holds(rows[3], runs[3]))
  t.notOk(table.holds(rows[3], runs[4]), 'another record\'s run')
  t.notOk(table.holds(rows[3], 0), 'no record has run 0')
  table.remove('k3', rows[3])
  t.notOk(table.holds(rows[3], runs[3]), 'a removed record is not held')
  const reused = table.insert('new', 99, 0)
  t.equal(reused, rows[3], 'its row is reused')
  t.notOk(table.holds(reused, runs[3]), 'by a record with a run of its own')
  t.notOk(table.holds(1 << 20, runs[5]), 'a row beyond the buffer holds nothing')

  // Shrink: remove all but two keys; the survivors move to the front.
  for (let i = 0; i < 20; i++) if (i !== 3 && i !== 15 && i !== 17) table.remove(`k${i}`, table.row(`k${i}`))
  table.remove('new', table.row('new'))
  table.removeCountedBy(-1)
  t.equal(table.capacity, RowTable.MIN_ROWS)
  for (const i of [15, 17]) {
    const row = table.row(`k${i}`)
    t.equal(table.run(row), runs[i], 'a moved record keeps its run')
    t.notOk(table.holds(rows[i], runs[i]), 'and is not found where it was')
    t.ok(table.holds(row, runs[i]), 'but where it is')
  }
})

t.test('marks follow their counts: addCount moves them back, uncount forward, restart clears them', async t => {
  const table = new RowTable()
  table.insert('a', 0, 0)
  const row = table.row('a')
  for (let i = 0; i < 4; i++) table.addCount(row, 0, i) // count 5
  table.mark(row, 1) // count 4
  table.mark(row, 3) // count 2
  t.same([1, 2, 3, 4, 5].map(within => table.markedWithin(row, within)), [0, 1, 1, 2, 2])
  t.equal(table.markedWithin(row, 0), 0)
  table.addCount(row, 0, 5) // count 6: counts 4 and 2 are now 2 and 4 back
  t.same([table.markedWithin(row, 2), table.markedWithin(row, 3), table.markedWithin(row, 5)], [0, 1, 2])
  table.uncount(row, 0) // count 5 again
  t.same([table.markedWithin(row, 1), table.markedWithin(row, 2), table.markedWithin(row, 4)], [0, 1, 2])
  table.restart(row, 0, 9)
  t.equal(table.markedWithin(row, 32), 0)
})

t.test('marks are kept for the 32 latest counts only', async t => {
  const table = new RowTable()
  table.insert('a', 0, 0)
  const row = table.row('a')
  for (let i = 0; i < 40; i++) table.addCount(row, 0, i) // count 41
  for (let back = 0; back < 40; back++) table.mark(row, back) // 32 and beyond: not kept
  t.same([table.markedWithin(row, 31), table.markedWithin(row, 32), table.markedWithin(row, 40)], [31, 32, 32])
  table.addCount(row, 0, 40)
  t.equal(table.markedWithin(row, 41), 31, 'the count 31 back moved out of the 32')
  table.uncount(row, 0)
  t.equal(table.markedWithin(row, 40), 31, 'and stays forgotten when the count comes back within them')
})

t.test('growing and shrinking move whole records', async t => {
  const table = new RowTable()
  for (let i = 0; i < 40; i++) {
    table.insert(`k${i}`, i, 100 + i)
    table.addCount(table.row(`k${i}`), i, 200 + i)
    table.mark(table.row(`k${i}`), i % 2)
  }
  table.removeCountedBy(229) // 10 live of 64: shrunk
  t.equal(table.capacity, 20)
  const row = table.row('k35')
  t.same([table.read(row), table.run(row), table.count(row), table.last(row)], [35, 36, 2, 235], 'the 36th run')
  t.same([table.markedWithin(row, 1), table.markedWithin(row, 2)], [0, 1], 'k35 marked the count before its latest')
})

t.test('removeCountedBy removes every key whose latest count came at or before the limit', async t => {
  const table = tableOf(10) // values 0..9
  table.removeCountedBy(4) // 4 itself goes
  t.equal(table.size, 5)
  t.same(valuesOf(table, 10), [5, 6, 7, 8, 9])
})

t.test('removeCountedBy before every count removes nothing', async t => {
  const table = tableOf(10)
  table.removeCountedBy(-1)
  t.equal(table.size, 10)
})

t.test('removeCountedBy shrinks the array when at most a quarter of the rows are live', async t => {
  // Each row: keys inserted (into 64 rows), keys left live, capacity after.
  const rows: Array<[number, number, number]> = [
    [64, 17, 64], // more than a quarter: kept
    [64, 16, 32], // exactly a quarter: shrunk to twice the live keys
    [64, 3, 16], // never below MIN_ROWS
    [64, 0, 16]
  ]
  for (const [count, live, capacity] of rows) {
    const table = tableOf(count)
    table.removeCountedBy(count - live - 1)
    t.equal(table.size, live)
    t.equal(table.capacity, capacity, `${live} of ${count} live`)
  }
})

t.test('an empty table of MIN_ROWS rows does not shrink further', async t => {
  const table = new RowTable()
  table.removeCountedBy(Infinity)
  t.equal(table.capacity, RowTable.MIN_ROWS)
  const quarter = tableOf(4)
  quarter.removeCountedBy(-1) // 4 of 16 live: a quarter, but already at the floor
  t.equal(quarter.capacity, RowTable.MIN_ROWS)
})

t.test('shrinking keeps every live key and its value', async t => {
  const table = tableOf(1000)
  table.removeCountedBy(899)
  t.equal(table.capacity, 200) // 100 live of 1024: shrunk to twice the live keys
  t.same(valuesOf(table, 1000), Array.from({ length: 100 }, (_, i) => 900 + i))
})

t.test('after shrinking, inserts fill the compacted array and grow it again by doubling', async t => {
  const table = tableOf(64)
  table.removeCountedBy(47) // 16 live of 64: shrunk to 32
  t.equal(table.capacity, 32)
  for (let i = 0; i < 16; i++) table.insert(`n${i}`, 100 + i, 0) // 32 live: full
  t.equal(table.capacity, 32)
  table.insert('one more', 200, 0)
  t.equal(table.capacity, 64)
  t.equal(table.size, 33)
  t.same(valuesOf(table, 64), Array.from({ length: 16 }, (_, i) => 48 + i))
  t.equal(table.read(table.row('n15')), 115)
  t.equal(table.read(table.row('one more')), 200)
})

t.test('after shrinking, rows freed before it are not handed out twice', async t => {
  const table = tableOf(64)
  for (let i = 0; i < 8; i++) table.remove(`k${i}`, table.row(`k${i}`)) // 8 freed rows
  table.removeCountedBy(47) // 16 live: shrunk, the free list starts over
  for (let i = 0; i < 16; i++) table.insert(`n${i}`, 100 + i, 0)
  const rows = new Set<number>()
  for (let i = 48; i < 64; i++) rows.add(table.row(`k${i}`))
  for (let i = 0; i < 16; i++) rows.add(table.row(`n${i}`))
  t.equal(rows.size, 32)
  t.same(valuesOf(table, 64), Array.from({ length: 16 }, (_, i) => 48 + i))
})

t.test('removeLowest removes the lowest numbers at most a limit, equal ones in the order of insertion, and lowest finds the lowest', async t => {
  const table = new RowTable()
  for (const [key, number] of [['c1', 3], ['a', 1], ['c2', 3], ['b', 2], ['c3', 3], ['high', 50]] as const) table.insert(key, number, 0)
  t.equal(table.removeLowest(10, 3), 3)
  t.same(['a', 'b', 'c1', 'c2', 'c3', 'high'].map(key => table.row(key) !== -1), [false, false, false, true, true, true], 'a, b, then the first 3 inserted')
  t.equal(table.lowest(), 3)
  t.equal(table.removeLowest(10, 5), 2, 'fewer at most the limit than asked for: all of them')
  t.equal(table.size, 1)
  t.equal(table.removeLowest(10, 1), 0, 'none at most the limit')
  t.equal(new RowTable().lowest(), Infinity)
})
