/**
 * A background ack load on a rollcall service, in a process of its own (`node --import tsx`): calls
 * of ACK_LOAD_IDS item IDs of one batch, one call at a time, ACK_LOAD_PER_SECOND calls a second (or
 * as fast as they are answered). It prints ACK_LOAD_READY once its batch is open and runs until it is
 * stopped. The BullMQ benchmark runs plain BullMQ beside it: the service and its database then take
 * the machine's CPU as they do in the rollcall rounds, while the worker does nothing for rollcall.
 */
import { itemIdsOf, RollcallClient } from '../../src/client';

const url = process.env.ACK_LOAD_URL as string;
const idsPerCall = Number(process.env.ACK_LOAD_IDS);
const perSecond = Number(process.env.ACK_LOAD_PER_SECOND);
/** Items of one batch: a minute of calls at the asked rate, within the API's limit for one add. */
const itemsPerBatch = Math.min(10_000_000, Math.max(idsPerCall, Math.ceil(idsPerCall * perSecond * 60)));

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function openItems(client: RollcallClient): Promise<Iterator<string>> {
  const { id } = await client.open({ userKey: 'bench-ack-load' });
  const added = await client.addItems(id, itemsPerBatch);
  return itemIdsOf(added.batchId, added.groups);
}

async function main(): Promise<void> {
  const client = new RollcallClient({ baseUrl: url });
  let items = await openItems(client);
  process.stdout.write('ACK_LOAD_READY\n');
  const interval = 1000 / perSecond;
  let due = performance.now();
  for (;;) {
    const ids: string[] = [];
    while (ids.length < idsPerCall) {
      const next = items.next();
      if (next.done) items = await openItems(client);
      else ids.push(next.value);
    }
    await client.ack(ids, { outcome: 'succeeded' });
    due = Math.max(due + interval, performance.now()); // behind schedule: the next call at once, no burst to catch up
    await sleep(due - performance.now());
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
