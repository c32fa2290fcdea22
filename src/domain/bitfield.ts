/** Bytes needed to hold `size` bits. */
export function bitfieldBytes(size: number): number {
  return (size + 7) >> 3;
}

/**
 * A fixed-size set of bits over a Buffer: bit i lives in byte i>>3 at position i&7 (LSB first).
 * The stored form is the Buffer itself, so a group of 8,192 items is a 1 KiB BLOB.
 */
export class Bitfield {
  private constructor(
    readonly size: number,
    private readonly bytes: Buffer,
  ) {}

  static empty(size: number): Bitfield {
    return new Bitfield(size, Buffer.alloc(bitfieldBytes(size)));
  }

  /** Wraps a stored BLOB (copied, so the caller's buffer is never changed); null means all zero. */
  static from(stored: Buffer | Uint8Array | null | undefined, size: number): Bitfield {
    const bytes = Buffer.alloc(bitfieldBytes(size));
    if (stored) Buffer.from(stored.buffer, stored.byteOffset, stored.byteLength).copy(bytes, 0, 0, bytes.length);
    return new Bitfield(size, bytes);
  }

  has(index: number): boolean {
    this.check(index);
    return ((this.bytes[index >> 3] ?? 0) & (1 << (index & 7))) !== 0;
  }

  /** Sets bit `index`; returns true when it was clear (the call changed something). */
  set(index: number): boolean {
    this.check(index);
    const at = index >> 3;
    const mask = 1 << (index & 7);
    const before = this.bytes[at] ?? 0;
    if (before & mask) return false;
    this.bytes[at] = before | mask;
    return true;
  }

  /** Clears bit `index`; returns true when it was set. */
  clear(index: number): boolean {
    this.check(index);
    const at = index >> 3;
    const mask = 1 << (index & 7);
    const before = this.bytes[at] ?? 0;
    if (!(before & mask)) return false;
    this.bytes[at] = before & ~mask;
    return true;
  }

  isEmpty(): boolean {
    for (let i = 0; i < this.bytes.length; i++) if (this.bytes[i] !== 0) return false;
    return true;
  }

  toBuffer(): Buffer {
    return Buffer.from(this.bytes);
  }

  private check(index: number): void {
    if (!Number.isInteger(index) || index < 0 || index >= this.size) {
      throw new RangeError(`bit ${index} is outside a field of ${this.size} bits`);
    }
  }
}
