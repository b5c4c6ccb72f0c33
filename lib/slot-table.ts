/**
 * A map from string keys to a small fixed record each, built so that updating a key's record
 * allocates nothing. A record is a number (what `removeAtMost` compares), a stamp set when the
 * record starts, a count, the time of the latest count, and which of the 32 latest counts are
 * marked.
 *
 * A `Map<string, number>` holding arbitrary doubles boxes every stored value in a fresh heap number
 * on each `set`, which on the pace's hot path costs about as much as the lookup itself. Here the Map
 * holds a small integer (a slot index, which V8 keeps unboxed) and the records live side by side in
 * typed arrays. Writing a key's record is a few typed-array stores.
 *
 * Invariants:
 * - every key in `#slotOf` owns exactly one slot, and no two keys share one;
 * - every slot below `#nextUnused` is either owned by a key or on the free list, never both. The
 *   free list is threaded through the numbers themselves: a free slot holds the index of the next
 *   free slot (-1 ends the list), so freeing costs no memory beside the arrays;
 * - the arrays grow by doubling when no slot is free, and `removeAtMost` shrinks them when at most
 *   a quarter is in use, so memory follows the number of live keys in both directions.
 *
 * Not safe to share between threads; in one JavaScript thread every method runs to completion.
 */
export class SlotTable {
  static readonly MIN_SLOTS = 16

  #slotOf = new Map<string, number>()
  #values = new Float64Array(SlotTable.MIN_SLOTS)
  #stamps = new Float64Array(SlotTable.MIN_SLOTS)
  #lasts = new Float64Array(SlotTable.MIN_SLOTS)
  #counts = new Int32Array(SlotTable.MIN_SLOTS)
  /** Bit i set: the count i before the latest is marked. Counts further back read as unmarked. */
  #marks = new Int32Array(SlotTable.MIN_SLOTS)
  /** The first slot of the free list, or -1. */
  #freeHead = -1
  #nextUnused = 0

  /** Number of keys held. */
  get size (): number {
    return this.#slotOf.size
  }

  /** Slots allocated (live, free or never used): what the table costs beside the Map. */
  get capacity (): number {
    return this.#values.length
  }

  /** The slot of `key`, or -1 when the key has no row. Does not change the table. */
  slot (key: string): number {
    const slot = this.#slotOf.get(key)
    return slot === undefined ? -1 : slot
  }

  /** The number stored in a slot returned by `slot`. */
  read (slot: number): number {
    return this.#values[slot]
  }

  /** Replaces the number stored in a live slot. Allocates nothing. */
  write (slot: number, value: number): void {
    this.#values[slot] = value
  }

  /** The stamp the slot's record started with. */
  stamp (slot: number): number {
    return this.#stamps[slot]
  }

  /** The slot's count: 1 when its record started, plus one per `addCount`, less one per `uncount`, as an int32 (wrapping). */
  count (slot: number): number {
    return this.#counts[slot]
  }

  /** When the latest count happened (as given to `addCount`, or the stamp); `uncount` leaves it. */
  last (slot: number): number {
    return this.#lasts[slot]
  }

  /** Stores `value`, adds one (unmarked) to the count, notes `at` as the time of it, and returns the new count. */
  addCount (slot: number, value: number, at: number): number {
    const count = (this.#counts[slot] + 1) | 0
    this.#values[slot] = value
    this.#counts[slot] = count
    this.#lasts[slot] = at
    this.#marks[slot] <<= 1
    return count
  }

  /** Stores `value` and takes the latest (unmarked) count away. */
  uncount (slot: number, value: number): void {
    this.#values[slot] = value
    this.#counts[slot] = (this.#counts[slot] - 1) | 0
    this.#marks[slot] >>>= 1
  }

  /** Marks the count `back` counts before the latest (0: the latest); beyond the 32 latest, nothing is kept. */
  mark (slot: number, back: number): void {
    if (back < 32) this.#marks[slot] |= 1 << back
  }

  /** How many of the `within` latest counts are marked (of the 32 latest at most). */
  markedWithin (slot: number, within: number): number {
    let bits = within >= 32 ? this.#marks[slot] : this.#marks[slot] & ((1 << within) - 1)
    bits -= (bits >>> 1) & 0x55555555
    bits = (bits & 0x33333333) + ((bits >>> 2) & 0x33333333)
    return Math.imul((bits + (bits >>> 4)) & 0x0f0f0f0f, 0x01010101) >>> 24
  }

  /** Starts a live slot's record afresh: `value`, a count of 1 (unmarked), and `stamp` as its stamp and as the time of that count. */
  restart (slot: number, value: number, stamp: number): void {
    this.#values[slot] = value
    this.#stamps[slot] = stamp
    this.#lasts[slot] = stamp
    this.#counts[slot] = 1
    this.#marks[slot] = 0
  }

  /** Adds `key` (which must not be present) with the record `restart` starts. */
  insert (key: string, value: number, stamp: number): void {
    let slot = this.#freeHead
    if (slot !== -1) {
      this.#freeHead = this.#values[slot] | 0 // an index, kept a small integer for the Map
    } else {
      if (this.#nextUnused === this.#values.length) this.#resize(this.#values.length * 2)
      slot = this.#nextUnused++
    }
    this.restart(slot, value, stamp)
    this.#slotOf.set(key, slot)
  }

  /** Removes `key`, whose slot is `slot`, and puts the slot at the head of the free list. */
  remove (key: string, slot: number): void {
    this.#slotOf.delete(key)
    this.#values[slot] = this.#freeHead
    this.#freeHead = slot
  }

  /**
   * Removes every key whose number is at most `limit`, then shrinks the arrays when no more than a
   * quarter of the slots are live. Runs in time proportional to the number of keys.
   */
  removeAtMost (limit: number): void {
    for (const [key, slot] of this.#slotOf) {
      if (this.#values[slot] <= limit) this.remove(key, slot)
    }
    const live = this.#slotOf.size
    if (live * 4 <= this.#values.length && this.#values.length > SlotTable.MIN_SLOTS) {
      this.#resize(Math.max(SlotTable.MIN_SLOTS, live * 2))
    }
  }

  /**
   * Moves the live records to the front of arrays of `length` slots (`length` > live keys), with
   * an empty free list. Reassigning an existing key's slot in the Map updates it in place and
   * allocates no entry.
   */
  #resize (length: number): void {
    const values = new Float64Array(length)
    const stamps = new Float64Array(length)
    const lasts = new Float64Array(length)
    const counts = new Int32Array(length)
    const marks = new Int32Array(length)
    let next = 0
    for (const [key, slot] of this.#slotOf) {
      values[next] = this.#values[slot]
      stamps[next] = this.#stamps[slot]
      lasts[next] = this.#lasts[slot]
      counts[next] = this.#counts[slot]
      marks[next] = this.#marks[slot]
      this.#slotOf.set(key, next++)
    }
    this.#values = values
    this.#stamps = stamps
    this.#lasts = lasts
    this.#counts = counts
    this.#marks = marks
    this.#freeHead = -1
    this.#nextUnused = next
  }
}
