/**
 * The Redis Cluster slot of a key, as Redis computes it: CRC16 (XMODEM: polynomial 0x1021, initial
 * value 0, no reflection) of the key's UTF-8 bytes, modulo 16384; of only the bytes between the
 * first `{` and the first `}` after it when there are any (a hash tag). ioredis routes a command by
 * the same number and keeps, in `Cluster.slots`, the addresses serving each slot, master first.
 */

/** CRC16 of every byte value, so that each byte of a key costs one lookup. */
const CRC16 = new Uint16Array(256)
for (let byte = 0; byte < 256; byte++) {
  let crc = byte << 8
  for (let bit = 0; bit < 8; bit++) crc = (crc & 0x8000) !== 0 ? (crc << 1) ^ 0x1021 : crc << 1
  CRC16[byte] = crc & 0xffff
}

const OPEN_BRACE = 0x7b // {
const CLOSE_BRACE = 0x7d // }

/** The slot of `key`, 0 to 16383. Allocates the key's bytes: only the outage path calls it. */
export function keySlot (key: string): number {
  const bytes = Buffer.from(key, 'utf8')
  let start = 0
  let end = bytes.length
  const open = bytes.indexOf(OPEN_BRACE)
  if (open !== -1) {
    const close = bytes.indexOf(CLOSE_BRACE, open + 1)
    if (close > open + 1) {
      start = open + 1
      end = close
    }
  }
  let crc = 0
  for (let i = start; i < end; i++) crc = ((crc << 8) & 0xffff) ^ CRC16[(crc >> 8) ^ bytes[i]]
  return crc & 16383
}
