/** Opens a batch of 1,000 items and puts one BullMQ job per item on the queue "thumbnails". */
import { Queue } from 'bullmq';
import { openBatch } from 'rollcall/producer';

import { client, redis } from '../shared';

async function main(): Promise<void> {
  const queue = new Queue('thumbnails', { connection: redis });
  let n = 0;
  const batch = await openBatch(client, {
    count: 1000,
    userKey: 'thumbnails-example',
    enqueue: async (itemIds) => {
      // Three attempts: rollcall hears of a failure only when the last one fails.
      await queue.addBulk(itemIds.map((rollcallItemId) => ({ name: 'thumbnail', data: { rollcallItemId, n: n++ }, opts: { attempts: 3 } })));
    },
  });
  console.log(`batch ${batch.id}: ${batch.total} jobs queued, ${batch.state}`);
  await queue.close();
}

void main();
