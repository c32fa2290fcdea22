import fc from 'fast-check';

import { AckCall, AckTarget } from '../../src/domain/ackCall';
import { groupKey, GroupRecord, planAcks } from '../../src/domain/ackPlan';
import { BatchRecord, Outcome } from '../../src/domain/batch';

const BATCH = '0193a1b2-c3d4-7e5f-8a9b-000000000001';
const G1 = '0193a1b2-c3d4-7e5f-8a9b-0000000000a1';
const G2 = '0193a1b2-c3d4-7e5f-8a9b-0000000000a2';

function batch(state: BatchRecord['state'], sizes: number[]): BatchRecord {
  const total = sizes.reduce((a, b) => a + b, 0);
  return {
    id: BATCH,
    tenant: '',
    state,
    userKey: null,
    metadata: null,
    callbackUrl: null,
    total,
    succeeded: 0,
    failed: 0,
    openGroups: sizes.length,
    createdAt: 1,
    updatedAt: 1,
    sealedAt: null,
    completedAt: null,
    cancelledAt: null,
    parentItem: null,
    firstFailureAt: null,
    failuresDropped: 0,
  };
}

function groups(sizes: number[]): Map<string, GroupRecord> {
  const ids = [G1, G2];
  return new Map(
    sizes.map((size, i) => [groupKey(BATCH, ids[i]!), { batchId: BATCH, id: ids[i]!, size, pending: size, succeededBits: null, failedBits: null }]),
  );
}

const target = (batchId: string, groupId: string, indexes: number[]): AckTarget => ({ batchId, groupId, prefix: `${batchId}:${groupId}:`, indexes });

/** One target per item, in order, as a call with repeats across targets would have. */
const call = (outcome: Outcome, items: Array<[string, number]>): AckCall => ({
  tenant: '',
  outcome,
  malformed: [],
  targets: items.map(([groupId, index]) => target(BATCH, groupId, [index])),
});

describe('planAcks', () => {
  it('when the last pending item of a sealed batch is acked, then that call alone reports completion', () => {
    const plan = planAcks(
      [
        call('succeeded', [
          [G1, 0],
          [G1, 1],
        ]),
        call('succeeded', [[G1, 1]]),
      ],
      new Map([[BATCH, batch('sealed', [2])]]),
      groups([2]),
      5,
    );
    expect(plan.results[0]).toMatchObject({ acked: 2, duplicates: 0, completedBatchIds: [BATCH] });
    expect(plan.results[1]).toMatchObject({ acked: 0, duplicates: 1, completedBatchIds: [] });
    expect(plan.batchWrites[0]).toMatchObject({ state: 'complete', succeeded: 2, openGroups: 0, completedAt: 5 });
  });

  it('when a failed item is acked succeeded later, then the retry wins and pending does not change', () => {
    const plan = planAcks(
      [call('failed', [[G1, 0]]), call('succeeded', [[G1, 0]]), call('failed', [[G1, 0]])],
      new Map([[BATCH, batch('open', [2])]]),
      groups([2]),
      5,
    );
    expect(plan.results.map((r) => [r.acked, r.duplicates])).toEqual([
      [1, 0],
      [1, 0],
      [0, 1],
    ]);
    expect(plan.batchWrites[0]).toMatchObject({ succeeded: 1, failed: 0 });
    expect(plan.groupWrites[0]).toMatchObject({ pending: 1, failedBits: null });
  });

  it('when one call closes the batch with an item and then retries a failed one, then both count, in either order', () => {
    const failedFirst = new Map([...groups([2])].map(([key, g]) => [key, { ...g, pending: 1, failedBits: Buffer.from([1]) }]));
    const stored = new Map([[BATCH, { ...batch('sealed', [2]), failed: 1 }]]);
    for (const order of [
      [
        [G1, 1],
        [G1, 0],
      ],
      [
        [G1, 0],
        [G1, 1],
      ],
    ] as Array<Array<[string, number]>>) {
      const plan = planAcks([call('succeeded', order)], stored, failedFirst, 5);
      expect([order, plan.results[0]]).toMatchObject([order, { acked: 2, duplicates: 0, completedBatchIds: [BATCH] }]);
      expect(plan.batchWrites[0]).toMatchObject({ state: 'complete', succeeded: 2, failed: 0 });
    }
  });

  it('when a batch is already complete, then its valid acks are duplicates and nothing is written', () => {
    const done = { ...batch('complete', [1]), succeeded: 0, failed: 1, openGroups: 0 };
    const plan = planAcks(
      [
        call('succeeded', [
          [G1, 0],
          [G1, 5],
        ]),
      ],
      new Map([[BATCH, done]]),
      groups([1]),
      5,
    );
    expect(plan.results[0]).toMatchObject({ acked: 0, duplicates: 1, rejected: [{ reason: 'index_out_of_range' }] });
    expect(plan.groupWrites).toEqual([]);
    expect(plan.batchWrites).toEqual([]);
  });

  it('when IDs name unknown batches or groups, then they are rejected with the reason and the rest apply', () => {
    const other = '0193a1b2-c3d4-7e5f-8a9b-000000000099';
    const c: AckCall = {
      tenant: '',
      outcome: 'succeeded',
      malformed: [{ id: 'x', reason: 'malformed' }],
      targets: [target(other, G1, [0]), target(BATCH, other, [0]), target(BATCH, G1, [0])],
    };
    const plan = planAcks([c], new Map([[BATCH, batch('open', [1])]]), groups([1]), 5);
    expect(plan.results[0]!.rejected.map((r) => r.reason)).toEqual(['malformed', 'unknown_batch', 'unknown_group']);
    expect(plan.results[0]!.acked).toBe(1);
  });

  it('when any acks are applied to a sealed batch, then counts match a model and completion is once', () => {
    const ack = fc.record({ outcome: fc.constantFrom<Outcome>('succeeded', 'failed'), group: fc.constantFrom(0, 1), index: fc.integer({ min: 0, max: 9 }) });
    fc.assert(
      fc.property(fc.array(fc.array(ack, { maxLength: 12 }), { maxLength: 30 }), (callSpecs) => {
        const sizes = [7, 3];
        const calls = callSpecs.map((spec) => ({
          tenant: '',
          outcome: spec[0]?.outcome ?? 'succeeded',
          malformed: [],
          targets: spec.map((a) => target(BATCH, [G1, G2][a.group]!, [a.index])),
        }));
        const itemsOf = (c: AckCall) => c.targets.map((t) => ({ groupId: t.groupId, index: t.indexes[0]! }));
        const plan = planAcks(calls, new Map([[BATCH, batch('sealed', sizes)]]), groups(sizes), 5);

        const model = new Map<string, Outcome>();
        let completions = 0;
        let complete = false;
        calls.forEach((c, i) => {
          let acked = 0;
          for (const item of itemsOf(c)) {
            const size = item.groupId === G1 ? 7 : 3;
            if (item.index >= size || complete) continue;
            const key = `${item.groupId}:${item.index}`;
            const was = model.get(key);
            if (was === 'succeeded' || was === c.outcome) continue;
            model.set(key, c.outcome);
            acked += 1;
          }
          // A call applies whole; the batch completes after it (its order of IDs changes nothing).
          if (model.size === 10) complete = true;
          expect(plan.results[i]!.acked).toBe(acked);
          const r = plan.results[i]!;
          expect(r.acked + r.duplicates + r.rejected.length).toBe(c.targets.length);
          completions += r.completedBatchIds.length;
        });
        const values = [...model.values()];
        const written = plan.batchWrites[0] ?? batch('sealed', sizes);
        expect(written.succeeded).toBe(values.filter((v) => v === 'succeeded').length);
        expect(written.failed).toBe(values.filter((v) => v === 'failed').length);
        expect(completions).toBe(complete ? 1 : 0);
        expect(written.state).toBe(complete ? 'complete' : 'sealed');
      }),
      { numRuns: 300 },
    );
  });
});
