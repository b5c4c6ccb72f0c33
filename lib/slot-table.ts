/**
 * A map from string keys to one double each, built so that updating a key's number allocates nothing.
 *
 * A `Map<string, number>` holding arbitrary doubles boxes every stored value in a fresh heap number
 * on each `set`, which on the pace's hot path costs about as much as the lookup itself. Here the Map
 * holds a small integer (a slot index, which V8 keeps unboxed) and the doubles live side by side in
 * one `Float64Array`. Writing a key's number is a typed-array store.
 *
 * Invariants:
 * - every key in `#slotOf` owns exactly one slot, and no two keys share one;
 * - every slot below `#nextUnused` is either owned by a key or on the free list, never both. The
 *   free list is threaded through the values themselves: a free slot holds the index of the next
 *   free slot (-1 ends the list), so freeing costs no memory beside the one array;
 * - the array grows by doubling when no slot is free, and `removeAtMost` shrinks it when at most a
 *   quarter is in use, so memory follows the number of live keys in both directions.
 *
 * Not safe to share between threads; in one JavaScript thread every method runs to completion.
 */
export class SlotTable {
  static readonly MIN_SLOTS = 16

  #slotOf = new Map<string, number>()
  #values = new Float64Array(SlotTable.MIN_SLOTS)
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

  /** The number stored in a slot returned by `slot` or `insert`. */
  read (slot: number): number {
    return this.#values[slot]
  }

  /** Replaces the number stored in a live slot. Allocates nothing. */
  write (slot: number, value: number): void {
    this.#values[slot] = value
  }

  /** Adds `key` (which must not be present) holding `value`. */
  insert (key: string, value: number): void {
    let slot = this.#freeHead
    if (slot !== -1) {
      this.#freeHead = this.#values[slot] | 0 // an index, kept a small integer for the Map
    } else {
      if (this.#nextUnused === this.#values.length) this.#resize(this.#values.length * 2)
      slot = this.#nextUnused++
    }
    this.#values[slot] = value
    this.#slotOf.set(key, slot)
  }

  /** Removes `key`, whose slot is `slot`, and puts the slot at the head of the free list. */
  remove (key: string, slot: number): void {
    this.#slotOf.delete(key)
    this.#values[slot] = this.#freeHead
    this.#freeHead = slot
  }

  /**
   * Removes every key whose number is at most `limit`, then shrinks the array when no more than a
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
   * Moves the live slots to the front of an array of `length` slots (`length` > live keys), with
   * an empty free list. Reassigning an existing key's slot in the Map updates it in place and
   * allocates no entry.
   */
  #resize (length: number): void {
    const values = new Float64Array(length)
    let next = 0
    for (const [key, slot] of this.#slotOf) {
      values[next] = this.#values[slot]
      this.#slotOf.set(key, next++)
    }
    this.#values = values
    this.#freeHead = -1
    this.#nextUnused = next
  }
}
