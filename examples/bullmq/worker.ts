/** Processes the "thumbnails" jobs and acks their rollcall items; prints each batch once it is complete. */
import { Worker } from 'bullmq';
import { rollcallProcessor, watchFailedJobs } from 'rollcall/bullmq';

import { client, redis, work } from '../shared';

interface Thumbnail {
  rollcallItemId: string;
  n: number;
}

const worker = new Worker<Thumbnail>(
  'thumbnails',
  rollcallProcessor(client, async (job) => {
    await work(job.data.n, job.attemptsMade === 0);
    return `thumbnail ${job.data.n}`;
  }),
  { connection: { ...redis, maxRetriesPerRequest: null }, concurrency: 50 },
);
// Jobs BullMQ fails without running them (stalled too often, say) get their items acked `failed` too.
const stopWatch = watchFailedJobs(client, worker);

// Print each batch once it is complete (the first job of a batch starts watching it).
const watching = new Set<string>();
worker.on('active', (job) => {
  const batchId = job.data.rollcallItemId.split(':')[0]!;
  if (watching.has(batchId)) return;
  watching.add(batchId);
  // Watching is a side show: a failed watch (a token without the read scope, a batch swept since)
  // is printed, and the worker goes on.
  client
    .waitForCompletion(batchId, { timeoutMs: 600_000 })
    .then(async (batch) => {
      const { failures } = await client.failures(batchId, { limit: 3 });
      console.log(`batch ${batchId} is ${batch.state}: ${batch.succeeded} succeeded, ${batch.failed} failed; first failures:`, failures);
    })
    .catch((error: Error) => console.error(`cannot watch batch ${batchId}: ${error.message}`));
});
console.log('worker running; Ctrl-C to stop');
process.once(
  'SIGINT',
  () =>
    void worker
      .close()
      .then(stopWatch)
      .then(
        () => process.exit(0),
        (error: unknown) => {
          console.error(error);
          process.exit(1);
        },
      ),
);
