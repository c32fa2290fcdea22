import fc from 'fast-check';

import { formatItemId, isUuid, parseItemId } from '../../src/domain/itemId';

const uuid = fc.uuid().map((u) => u.toLowerCase());

describe('item IDs', () => {
  it('when an ID is formatted and parsed, then the parts come back (round trip)', () => {
    fc.assert(
      fc.property(uuid, uuid, fc.integer({ min: 0, max: 2 ** 31 }), (batchId, groupId, index) => {
        expect(parseItemId(formatItemId({ batchId, groupId, index }))).toEqual({ batchId, groupId, index });
      }),
    );
  });

  it('when the UUIDs are upper case, then they are read as their lower-case form', () => {
    const b = '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b';
    const g = '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c';
    expect(parseItemId(`${b.toUpperCase()}:${g.toUpperCase()}:7`)).toEqual({ batchId: b, groupId: g, index: 7 });
  });

  it.each([
    ['empty', ''],
    ['no index', '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b:0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c:'],
    ['negative index', '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b:0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c:-1'],
    ['fraction', '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b:0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c:1.5'],
    ['plus sign', '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b:0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c:+1'],
    ['bad hex', '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5g:0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c:1'],
    ['wrong separator', '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c:1'],
    ['missing dash', '0193a1b2c-3d4-7e5f-8a9b-0c1d2e3f4a5b:0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c:1'],
    ['two parts', '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b:1'],
    ['trailing text', '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b:0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c:1 '],
    ['a leading zero', '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b:0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c:07'],
    ['huge index', `0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b:0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c:${'9'.repeat(40)}`],
  ])('when an ID has %s, then it is malformed', (_what, id) => {
    expect(parseItemId(id)).toBeNull();
  });

  it('when any string is parsed, then it either round-trips or is null, never throws', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 120 }), (text) => {
        const ref = parseItemId(text);
        if (ref) expect(parseItemId(formatItemId(ref))).toEqual(ref);
      }),
    );
  });

  it('when a UUID is checked, then only the canonical 8-4-4-4-12 form passes', () => {
    fc.assert(fc.property(fc.uuid(), (u) => expect(isUuid(u)).toBe(true)));
    expect(isUuid('0193a1b2c3d47e5f8a9b0c1d2e3f4a5b')).toBe(false);
    expect(isUuid('0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b ')).toBe(false);
  });
});
