import fc from 'fast-check';

import { callFromCompact, callFromIds, callSize, compactSize } from '../../src/domain/ackCall';
import { parseItemId } from '../../src/domain/itemId';

const B = '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b';
const G = '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c';
const H = '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5d';

describe('reading ack calls', () => {
  it('when IDs share a group, then they become one target with their indexes in order', () => {
    const call = callFromIds([`${B}:${G}:3`, `${B}:${H}:1`, `${B}:${G}:0`, 'junk', `${B}:${G}:3`], 'succeeded');
    expect(call.targets).toEqual([
      { batchId: B, groupId: G, prefix: `${B}:${G}:`, indexes: [3, 0, 3] },
      { batchId: B, groupId: H, prefix: `${B}:${H}:`, indexes: [1] },
    ]);
    expect(call.malformed).toEqual([{ id: 'junk', reason: 'malformed' }]);
    expect(callSize(call)).toBe(5);
  });

  it('when any list of strings is read, then each counts once and valid ones agree with parseItemId', () => {
    const id = fc.oneof(
      fc.string({ maxLength: 90 }),
      fc
        .tuple(fc.constantFrom(B, G, B.toUpperCase()), fc.constantFrom(G, H), fc.oneof(fc.nat(99999).map(String), fc.string({ maxLength: 4 })))
        .map(([b, g, i]) => `${b}:${g}:${i}`),
    );
    fc.assert(
      fc.property(fc.array(id, { maxLength: 40 }), (ids) => {
        const call = callFromIds(ids, 'failed');
        expect(callSize(call)).toBe(ids.length);
        const rebuilt = call.targets.flatMap((t) => t.indexes.map((i) => t.prefix + i));
        const valid = ids.filter((x) => parseItemId(x) !== null);
        expect(rebuilt.sort()).toEqual([...valid].sort());
        expect(call.malformed.map((m) => m.id).sort()).toEqual(ids.filter((x) => parseItemId(x) === null).sort());
      }),
    );
  });

  it('when the compact form has ranges, then they expand inclusively and are counted without expanding', () => {
    const entries = [
      { batchId: B, groupId: G, indexes: [5, [0, 2] as [number, number]] },
      { batchId: 'nope', groupId: G, indexes: [1] },
    ];
    expect(compactSize(entries)).toBe(5);
    const call = callFromCompact(entries, 'succeeded');
    expect(call.targets).toEqual([{ batchId: B, groupId: G, prefix: `${B}:${G}:`, indexes: [5, 0, 1, 2] }]);
    expect(call.malformed).toEqual([{ id: `nope:${G}:1`, reason: 'malformed' }]);
    expect(compactSize([{ batchId: B, groupId: G, indexes: [[0, 2 ** 31]] }])).toBe(2 ** 31 + 1);
  });
});
