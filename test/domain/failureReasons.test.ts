import fc from 'fast-check';

import type { AckCall } from '../../src/domain/ackCall';
import { batchesNamedByFailures, planFailureReasons, ReasonTouch, runsNamedByFailures } from '../../src/domain/failureReasons';

const key = fc.integer({ min: 0, max: 30 }).map((i) => `g:${i}`);
const touch: fc.Arbitrary<ReasonTouch> = fc.oneof(
  fc.record({ kind: fc.constant('failed' as const), key, error: fc.string({ maxLength: 5 }), again: fc.boolean() }),
  fc.record({ kind: fc.constant('cleared' as const), key }),
);
const stored = fc.uniqueArray(key, { maxLength: 12 }).map((keys) => new Set(keys));

/** What a transaction reads of `kept`: its count, and every key (the named ones among them, and more). */
const known = (kept: Set<string>) => ({ count: kept.size, named: kept });

/** The kept set after a plan: what was stored, minus deletes, plus upserts. */
const keptAfter = (before: Set<string>, plan: ReturnType<typeof planFailureReasons>) => {
  const kept = new Set([...before].filter((k) => !plan.deletes.has(k)));
  for (const k of plan.upserts.keys()) kept.add(k);
  return kept;
};

describe('failure reasons under the per-batch cap', () => {
  it('when any failures and retries happen, then no more than the cap (or what was stored) is kept', () => {
    fc.assert(
      fc.property(stored, fc.array(touch, { maxLength: 60 }), fc.integer({ min: 0, max: 15 }), (before, touches, cap) => {
        const kept = keptAfter(before, planFailureReasons(known(before), touches, cap));
        expect(kept.size).toBeLessThanOrEqual(Math.max(cap, before.size));
        if (before.size <= cap) expect(kept.size).toBeLessThanOrEqual(cap);
      }),
    );
  });

  it('when an item fails several times, then its latest reason wins; a retry that won removes it', () => {
    fc.assert(
      fc.property(stored, fc.array(touch, { maxLength: 60 }), fc.integer({ min: 0, max: 15 }), (before, touches, cap) => {
        const plan = planFailureReasons(known(before), touches, cap);
        const kept = keptAfter(before, plan);
        const last = new Map<string, ReasonTouch>();
        for (const t of touches) last.set(t.key, t);
        for (const [k, t] of last) {
          if (t.kind === 'cleared') expect(kept.has(k)).toBe(false);
          if (plan.upserts.has(k)) {
            expect(t.kind).toBe('failed');
            expect(plan.upserts.get(k)).toBe((t as { error: string }).error);
          }
        }
        for (const k of plan.upserts.keys()) expect(plan.deletes.has(k)).toBe(false);
      }),
    );
  });

  it('when failures arrive, then each new one is kept or dropped, and dropped only while the list is full', () => {
    fc.assert(
      fc.property(stored, fc.array(touch, { maxLength: 60 }), fc.integer({ min: 0, max: 15 }), (before, touches, cap) => {
        // Replaying one touch at a time: a failure is dropped exactly when the item is not kept and the list is full.
        let current = new Set(before);
        let dropped = 0;
        for (const t of touches) {
          const step = planFailureReasons(known(current), [t], cap);
          if (t.kind === 'failed' && step.dropped === 1) {
            expect(t.again).toBe(false); // a failure again was counted when it first failed
            expect(current.has(t.key)).toBe(false);
            expect(current.size).toBeGreaterThanOrEqual(cap);
          }
          dropped += step.dropped;
          current = keptAfter(current, step);
        }
        const whole = planFailureReasons(known(before), touches, cap);
        expect(whole.dropped).toBe(dropped);
        expect(keptAfter(before, whole)).toEqual(current);
      }),
    );
  });

  it('when only the stored keys among those the touches name are read (not every stored key), then the plan is the same as with every key read', () => {
    fc.assert(
      fc.property(stored, fc.array(touch, { maxLength: 60 }), fc.integer({ min: 0, max: 15 }), (before, touches, cap) => {
        const touched = new Set(touches.map((t) => t.key));
        const plan = planFailureReasons({ count: before.size, named: new Set([...before].filter((k) => touched.has(k))) }, touches, cap);
        expect(plan).toEqual(planFailureReasons(known(before), touches, cap));
      }),
    );
  });

  it('when 10,000 distinct items fail against a cap of 1,000, then 1,000 are kept and the rest counted', () => {
    const touches: ReasonTouch[] = Array.from({ length: 10_000 }, (_, i) => ({ kind: 'failed', key: `g:${i}`, error: 'x' }));
    const plan = planFailureReasons(known(new Set()), touches, 1000);
    expect(plan.upserts.size).toBe(1000);
    expect(plan.dropped).toBe(9000);
  });

  it('when a failure with an error is planned without the stored keys, then it refuses', () => {
    expect(() => planFailureReasons(null, [{ kind: 'failed', key: 'g:1', error: 'e' }], 5)).toThrow();
    expect(planFailureReasons(null, [{ kind: 'cleared', key: 'g:1' }], 5).deletes).toEqual(new Set(['g:1']));
  });
});

describe('the items whose stored reasons an ack transaction reads', () => {
  const batch = (n: number) => `0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5${n}`;
  const target = (b: number, indexes: number[], foreign?: true) => ({
    batchId: batch(b),
    groupId: `g${b}`,
    prefix: '',
    indexes,
    ...(foreign ? { foreign } : {}),
  });
  const call = (error: string | undefined, ...targets: ReturnType<typeof target>[]): AckCall => ({
    tenant: '',
    outcome: error === undefined ? 'succeeded' : 'failed',
    ...(error === undefined ? {} : { error }),
    targets,
    malformed: [],
  });

  it('when calls fail items with an error, then the items of every call in those batches are read, as runs, and no other batch', () => {
    const calls = [call('boom', target(1, [5, 3, 4, 9])), call(undefined, target(1, [6, 20]), target(2, [1])), call('x', target(3, [1], true))];
    expect(batchesNamedByFailures(calls)).toEqual([batch(1)]);
    expect(runsNamedByFailures(calls).map(({ from, to }) => [from, to])).toEqual([
      [3, 6],
      [9, 9],
      [20, 20],
    ]);
  });

  it('when an index is past what a stored reason can have (2^31 and more), then it is not read (the ack answers it index_out_of_range)', () => {
    expect(runsNamedByFailures([call('boom', target(1, [2 ** 31 - 1, 2 ** 31, 99_999_999_999]))]).map(({ from, to }) => [from, to])).toEqual([
      [2 ** 31 - 1, 2 ** 31 - 1],
    ]);
  });
});
