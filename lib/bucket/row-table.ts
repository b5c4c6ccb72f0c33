/**
 * A pace's rows: a map from string keys to a small fixed record each, built so that updating a
 * key's record allocates nothing. A record is a number, its run (a number given when the record
 * starts), a count, the time of the latest count (what `removeCountedBy` compares), and which of
 * the 32 latest counts are marked. Records sit in numbered rows of one buffer; a run is never given
 * twice in one table, so a row number and a run name one record for good: a caller may keep them
 * and find the record again without the key, as long as `holds` says the row still has it.
 *
 * A `Map<string, number>` holding arbitrary doubles boxes every stored value in a fresh heap number
 * on each `set`, which on the pace's hot path costs about as much as the lookup itself. Here the Map
 * holds a small integer (a row number, which V8 keeps unboxed) and the records live one after the
 * other in one buffer, 32 bytes each (three doubles, then the count and the marks as two int32s),
 * so that a record is one read of memory however large the table. Writing a key's record is a few
 * typed-array stores.
 *
 * Invariants:
 * - every key in `#rowOf` owns exactly one row, and no two keys share one;
 * - every row below `#nextUnused` is either owned by a key or on the free list, never both. The
 *   free list is threaded through the numbers themselves: a free row holds the number of the next
 *   free row (-1 ends the list), so freeing costs no memory beside the buffer; a free or unused
 *   row's run is 0, which no record has;
 * - a record keeps its run while it lives, wherever a resize moves it;
 * - the buffer grows by doubling when no row is free, and `removeCountedBy` shrinks it when at most
 *   a quarter is in use, so memory follows the number of live keys in both directions.
 *
 * Not safe to share between threads; in one JavaScript thread every method runs to completion.
 */
export class RowTable {
  static readonly MIN_ROWS = 16

  #rowOf = new Map<string, number>()
  /** Row i: the number at [4i], the run at [4i + 1], the time of the latest count at [4i + 2]. */
  #doubles = new Float64Array(4 * RowTable.MIN_ROWS)
  /**
   * The same buffer: row i's count at [8i + 6] and its marks at [8i + 7] (bit j set: the count j
   * before the latest is marked; counts further back read as unmarked).
   */
  #ints = new Int32Array(this.#doubles.buffer)
  /** The first row of the free list, or -1. */
  #freeHead = -1
  /** The latest run given: runs count up from 1 (exact as doubles for 2^53 records). */
  #lastRun = 0
  #nextUnused = 0

  /** Number of keys held. */
  get size (): number {
    return this.#rowOf.size
  }

  /** Rows allocated (live, free or never used): what the table costs beside the Map. */
  get capacity (): number {
    return this.#doubles.length >> 2
  }

  /** The keys held, in insertion order. The table must not change while they are read. */
  keys (): IterableIterator<string> {
    return this.#rowOf.keys()
  }

  /** The row of `key`, or -1 when the key has no row. Does not change the table. */
  row (key: string): number {
    const row = this.#rowOf.get(key)
    return row === undefined ? -1 : row
  }

  /** The number stored in a row returned by `row`. */
  read (row: number): number {
    return this.#doubles[row << 2]
  }

  /** Replaces the number stored in a live row. Allocates nothing. */
  write (row: number, value: number): void {
    this.#doubles[row << 2] = value
  }

  /** The run the row's record started with. */
  run (row: number): number {
    return this.#doubles[(row << 2) + 1]
  }

  /**
   * Whether `row` holds the record of `run`, a run this table gave: false once the record
   * is removed or a resize has moved it to another row. Any row number may be asked about.
   */
  holds (row: number, run: number): boolean {
    const at = (row << 2) + 1
    return at < this.#doubles.length && this.#doubles[at] === run
  }

  /** The row's count: 1 when its record started, plus one per `addCount`, less one per `uncount`, as an int32 (wrapping). */
  count (row: number): number {
    return this.#ints[(row << 3) + 6]
  }

  /** When the latest count happened (as given to `addCount` or `restart`); `uncount` leaves it. */
  last (row: number): number {
    return this.#doubles[(row << 2) + 2]
  }

  /** Stores `value`, adds one (unmarked) to the count, notes `at` as the time of it, and returns the new count. */
  addCount (row: number, value: number, at: number): number {
    const record = row << 2
    const ints = this.#ints
    const count = (ints[(record << 1) + 6] + 1) | 0
    this.#doubles[record] = value
    this.#doubles[record + 2] = at
    ints[(record << 1) + 6] = count
    ints[(record << 1) + 7] <<= 1
    return count
  }

  /** Stores `value` and takes the latest (unmarked) count away. */
  uncount (row: number, value: number): void {
    this.#doubles[row << 2] = value
    const ints = this.#ints
    ints[(row << 3) + 6] = (ints[(row << 3) + 6] - 1) | 0
    ints[(row << 3) + 7] >>>= 1
  }

  /** Marks the count `back` counts before the latest (0: the latest); beyond the 32 latest, nothing is kept. */
  mark (row: number, back: number): void {
    if (back < 32) this.#ints[(row << 3) + 7] |= 1 << back
  }

  /** How many of the `within` latest counts are marked (of the 32 latest at most). */
  markedWithin (row: number, within: number): number {
    const marks = this.#ints[(row << 3) + 7]
    let bits = within >= 32 ? marks : marks & ((1 << within) - 1)
    bits -= (bits >>> 1) & 0x55555555
    bits = (bits & 0x33333333) + ((bits >>> 2) & 0x33333333)
    return Math.imul((bits + (bits >>> 4)) & 0x0f0f0f0f, 0x01010101) >>> 24
  }

  /**
   * Starts a live row's record afresh, under a new run: `value`, and a count of 1 (unmarked) at
   * time `at`. Returns the time of the latest count the row held before (meaningless for a free
   * row).
   */
  restart (row: number, value: number, at: number): number {
    const record = row << 2
    const doubles = this.#doubles
    const before = doubles[record + 2]
    doubles[record] = value
    doubles[record + 1] = ++this.#lastRun
    doubles[record + 2] = at
    this.#ints[(record << 1) + 6] = 1
    this.#ints[(record << 1) + 7] = 0
    return before
  }

  /** Adds `key` (which must not be present) with the record `restart` starts, and returns its row. */
  insert (key: string, value: number, at: number): number {
    let row = this.#freeHead
    if (row !== -1) {
      this.#freeHead = this.#doubles[row << 2] | 0 // an index, kept a small integer for the Map
    } else {
      if (this.#nextUnused === this.capacity) this.#resize(this.capacity * 2)
      row = this.#nextUnused++
    }
    this.restart(row, value, at)
    this.#rowOf.set(key, row)
    return row
  }

  /** Removes `key`, whose row is `row`, and puts the row at the head of the free list. */
  remove (key: string, row: number): void {
    this.#rowOf.delete(key)
    this.#doubles[row << 2] = this.#freeHead
    this.#doubles[(row << 2) + 1] = 0
    this.#freeHead = row
  }

  /**
   * Removes every key whose latest count came at or before `limit` (the time given to `addCount`
   * or `restart`), then shrinks the buffer when no more than a quarter of the rows are live. Runs
   * in time proportional to the number of keys.
   */
  removeCountedBy (limit: number): void {
    const doubles = this.#doubles
    for (const [key, row] of this.#rowOf) {
      if (doubles[(row << 2) + 2] <= limit) this.remove(key, row)
    }
    const live = this.#rowOf.size
    if (live * 4 <= this.capacity && this.capacity > RowTable.MIN_ROWS) {
      this.#resize(Math.max(RowTable.MIN_ROWS, live * 2))
    }
  }

  /**
   * Removes up to `most` keys whose number is at most `limit`, the lowest numbers first (equal
   * ones in the order their keys were inserted), and returns how many. Runs in time proportional
   * to the number of keys, and sorts the numbers found only when there are more than `most`.
   */
  removeLowest (limit: number, most: number): number {
    const doubles = this.#doubles
    const found: number[] = []
    for (const row of this.#rowOf.values()) {
      if (doubles[row << 2] <= limit) found.push(doubles[row << 2])
    }
    let below = limit
    let atLimit = most
    if (found.length > most) {
      const sorted = Float64Array.from(found).sort()
      below = sorted[most - 1]
      // Keys numbered below the threshold all go; of those at it, as many as are left to remove.
      let under = 0
      while (sorted[under] < below) under++
      atLimit = most - under
    }
    let removed = 0
    for (const [key, row] of this.#rowOf) {
      const number = doubles[row << 2]
      if (number < below || (number === below && atLimit-- > 0)) {
        this.remove(key, row)
        removed++
      }
    }
    return removed
  }

  /** The lowest number of any key; Infinity when there is none. */
  lowest (): number {
    const doubles = this.#doubles
    let lowest = Infinity
    for (const row of this.#rowOf.values()) lowest = Math.min(lowest, doubles[row << 2])
    return lowest
  }

  /**
   * Moves the live records to the front of a buffer of `length` rows (`length` > live keys), with
   * an empty free list. Reassigning an existing key's row in the Map updates it in place and
   * allocates no entry.
   */
  #resize (length: number): void {
    const doubles = new Float64Array(4 * length)
    const ints = new Int32Array(doubles.buffer)
    const oldDoubles = this.#doubles
    const oldInts = this.#ints
    let next = 0
    for (const [key, row] of this.#rowOf) {
      // Three doubles, then the two int32s as themselves (a double made of their bits might be a NaN
      // whose bits a copy would not keep).
      const from = row << 2
      const to = next << 2
      doubles[to] = oldDoubles[from]
      doubles[to + 1] = oldDoubles[from + 1]
      doubles[to + 2] = oldDoubles[from + 2]
      ints[(to << 1) + 6] = oldInts[(from << 1) + 6]
      ints[(to << 1) + 7] = oldInts[(from << 1) + 7]
      this.#rowOf.set(key, next++)
    }
    this.#doubles = doubles
    this.#ints = ints
    this.#freeHead = -1
    this.#nextUnused = next
  }
}
