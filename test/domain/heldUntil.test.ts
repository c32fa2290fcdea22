import fc from 'fast-check';

import { heldUntil } from '../../src/domain/delivery';

const LEASE = 10_000;
const GRAIN = 5_000;

describe('heldUntil: how long an event held back can wait unread', () => {
  const time = fc.integer({ min: 0, max: 10 ** 13 });
  const blockerAt = fc.option(fc.integer({ min: -LEASE * 10, max: LEASE * 100 }), { nil: undefined });
  const event = fc.constantFrom('batch.completed', 'batch.cancelled');

  it('never past the latest blocker that applies (the earliest the event could go), always in the future, and only for a blocker beyond a lease', () => {
    fc.assert(
      fc.property(event, time, blockerAt, blockerAt, (name, now, firstFailure, children) => {
        const blockers = {
          firstFailure: firstFailure === undefined ? undefined : now + firstFailure,
          children: children === undefined ? undefined : now + children,
        };
        const applying = [blockers.firstFailure, name === 'batch.completed' ? blockers.children : undefined].filter((t): t is number => t !== undefined);
        const until = heldUntil(name, blockers, now, LEASE, GRAIN);
        if (applying.length === 0 || Math.max(...applying) <= now + LEASE) return until === null;
        return until !== null && until <= Math.max(...applying) && until > Math.max(...applying) - GRAIN && until > now;
      }),
    );
  });

  it('a batch.cancelled is not held for children (only a parent’s batch.completed waits for them)', () => {
    expect(heldUntil('batch.cancelled', { children: 60_000 }, 0, LEASE, GRAIN)).toBeNull();
    expect(heldUntil('batch.completed', { children: 62_500 }, 0, LEASE, GRAIN)).toBe(60_000);
  });
});
