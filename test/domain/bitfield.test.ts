import fc from 'fast-check';

import { Bitfield, bitfieldBytes } from '../../src/domain/bitfield';

const sizeAndIndexes = fc
  .integer({ min: 1, max: 9000 })
  .chain((size) => fc.tuple(fc.constant(size), fc.array(fc.integer({ min: 0, max: size - 1 }), { maxLength: 300 })));

/** Bits set in the stored form (the service itself never counts bits: counters live on the rows). */
const countOf = (field: Bitfield): number => [...field.toBuffer()].reduce((n, byte) => n + byte.toString(2).replace(/0/g, '').length, 0);

describe('Bitfield', () => {
  it('when a group of 8,192 items is stored, then it takes 1 KiB', () => {
    expect(Bitfield.empty(8192).toBuffer().length).toBe(1024);
    expect(bitfieldBytes(1)).toBe(1);
    expect(bitfieldBytes(9)).toBe(2);
  });

  it('when bits are set, then exactly those bits test true and count equals the distinct indexes', () => {
    fc.assert(
      fc.property(sizeAndIndexes, ([size, indexes]) => {
        const field = Bitfield.empty(size);
        for (const i of indexes) field.set(i);
        const distinct = new Set(indexes);
        expect(countOf(field)).toBe(distinct.size);
        const wrong = Array.from({ length: size }, (_, i) => i).filter((i) => field.has(i) !== distinct.has(i));
        expect(wrong).toEqual([]);
      }),
    );
  });

  it('when a bit is set twice, then the second set reports no change (idempotence)', () => {
    fc.assert(
      fc.property(sizeAndIndexes, ([size, indexes]) => {
        const field = Bitfield.empty(size);
        const seen = new Set<number>();
        for (const i of indexes) {
          expect(field.set(i)).toBe(!seen.has(i));
          seen.add(i);
        }
      }),
    );
  });

  it('when a field is stored and read back, then it holds the same bits (round trip)', () => {
    fc.assert(
      fc.property(sizeAndIndexes, ([size, indexes]) => {
        const field = Bitfield.empty(size);
        for (const i of indexes) field.set(i);
        const again = Bitfield.from(field.toBuffer(), size);
        expect(again.toBuffer().equals(field.toBuffer())).toBe(true);
        expect(countOf(again)).toBe(countOf(field));
      }),
    );
  });

  it('when bits are cleared, then they test false and the count drops by one each', () => {
    fc.assert(
      fc.property(sizeAndIndexes, ([size, indexes]) => {
        const field = Bitfield.empty(size);
        for (const i of indexes) field.set(i);
        for (const i of new Set(indexes)) {
          const before = countOf(field);
          expect(field.clear(i)).toBe(true);
          expect(field.has(i)).toBe(false);
          expect(countOf(field)).toBe(before - 1);
        }
        expect(field.isEmpty()).toBe(true);
      }),
    );
  });

  it('when an index is outside the field, then it throws instead of touching another bit', () => {
    const field = Bitfield.empty(10);
    expect(() => field.set(10)).toThrow(RangeError);
    expect(() => field.has(-1)).toThrow(RangeError);
    expect(() => field.set(1.5)).toThrow(RangeError);
    expect(countOf(field)).toBe(0);
  });

  it('when a stored null is read, then every bit is clear, and the stored buffer is never changed', () => {
    expect(countOf(Bitfield.from(null, 16))).toBe(0);
    const stored = Buffer.from([0b0000_0001, 0]);
    const field = Bitfield.from(stored, 16);
    field.set(9);
    expect(stored).toEqual(Buffer.from([1, 0]));
    expect(field.has(0) && field.has(9)).toBe(true);
  });
});
