import type { RollcallClient } from '../../src/client';
import type { ItemStatus } from '../../src/contract/responses';
import { CancelledBatches } from '../../src/integrations/cancelledBatches';

/** A client whose item look-ups answer when the test says: only `item` is used by CancelledBatches. */
function clientAnsweringLater() {
  let answer!: (status: ItemStatus) => void;
  const asked = new Promise<ItemStatus>((resolve) => (answer = resolve));
  const client = { item: () => asked } as unknown as RollcallClient;
  return { client, answer };
}

/** Lets queued promise callbacks run. */
const nextTurn = () => new Promise((resolve) => setImmediate(resolve));

describe('what a process knows of cancelled batches', () => {
  const batchId = '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b';
  const item = `${batchId}:0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c:0`;

  it('when a rejected ack says the batch is cancelled while a look-up is out, then those waiting on the look-up hear "cancelled"', async () => {
    const { client, answer } = clientAnsweringLater();
    const batches = new CancelledBatches(client);
    const waiting = batches.isCancelled(item);
    expect(waiting).toBeInstanceOf(Promise);
    batches.learnCancelled(item); // from another job's ack, answered first
    answer({ id: item, batchId, state: 'pending', batchState: 'sealed' }); // read before the cancel
    expect(await waiting).toBe(true);
    expect(batches.isCancelled(item)).toBe(true);
  });

  /** A client whose look-ups each answer when the test says, in order. */
  function clientAnsweringEachLater() {
    const answers: Array<(status: ItemStatus) => void> = [];
    const client = { item: () => new Promise<ItemStatus>((resolve) => answers.push(resolve)) } as unknown as RollcallClient;
    return { client, answers };
  }
  const sealed: ItemStatus = { id: item, batchId, state: 'pending', batchState: 'sealed' };
  const cancelledState: ItemStatus = { id: item, batchId, state: 'pending', batchState: 'cancelled' };

  it("when a batch's jobs keep coming and what is known is stale, then they go on with it while one look-up asks again behind them", async () => {
    const { client, answers } = clientAnsweringEachLater();
    const batches = new CancelledBatches(client, { cancelCheckIntervalMs: 200 });
    const first = batches.isCancelled(item);
    expect(first).toBeInstanceOf(Promise); // nothing known yet: the first jobs wait for the first answer
    await nextTurn(); // the look-up is sent on the next microtask
    answers[0]!(sealed);
    expect(await first).toBe(false);
    while (answers.length < 2) {
      // a job every few ms, past the interval, until the batch is asked about again
      expect(batches.isCancelled(item)).toBe(false);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    expect(batches.isCancelled(item)).toBe(false); // the look-up is out: jobs still go on at once
    await nextTurn();
    expect(answers).toHaveLength(2); // one look-up at a time
    answers[1]!(cancelledState);
    await nextTurn();
    expect(batches.isCancelled(item)).toBe(true);
  });

  it('when a job comes after a quiet spell of an interval, then it waits for a fresh answer', async () => {
    const { client, answers } = clientAnsweringEachLater();
    const batches = new CancelledBatches(client, { cancelCheckIntervalMs: 5 });
    const first = batches.isCancelled(item);
    await nextTurn();
    answers[0]!(sealed);
    expect(await first).toBe(false);
    await new Promise((resolve) => setTimeout(resolve, 20)); // no job of the batch for longer than the interval
    const later = batches.isCancelled(item); // a retry after its backoff, say
    expect(later).toBeInstanceOf(Promise);
    await nextTurn();
    answers[1]!(cancelledState);
    expect(await later).toBe(true);
  });

  it('when jobs come together after a quiet spell (held messages let go at once), then each of them waits for the fresh answer', async () => {
    const { client, answers } = clientAnsweringEachLater();
    const batches = new CancelledBatches(client, { cancelCheckIntervalMs: 100 });
    const first = batches.isCancelled(item);
    await nextTurn();
    answers[0]!(sealed);
    expect(await first).toBe(false);
    await new Promise((resolve) => setTimeout(resolve, 150)); // a quiet spell longer than the interval
    const together = [batches.isCancelled(item), batches.isCancelled(item), batches.isCancelled(item)];
    for (const one of together) expect(one).toBeInstanceOf(Promise); // not the stale "not cancelled"
    await nextTurn();
    expect(answers).toHaveLength(2); // one look-up for all of them
    // A job of a later turn goes on with what was known, as a steady stream does: a slow look-up
    // holds only the jobs that came with the one that found the quiet spell.
    expect(batches.isCancelled(item)).toBe(false);
    answers[1]!(cancelledState);
    expect(await Promise.all(together)).toEqual([true, true, true]);
  });

  it('when the look-up throws before it is sent, then the batch counts as not cancelled', async () => {
    const client = {
      item: () => {
        throw new URIError('URI malformed');
      },
    } as unknown as RollcallClient;
    await expect(new CancelledBatches(client).isCancelled(item)).resolves.toBe(false);
  });
});
