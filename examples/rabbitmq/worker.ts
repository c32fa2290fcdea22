/** Consumes "thumbnails" and acks each message's rollcall item, then the message; prints completed batches. */
import amqp from 'amqplib';
import { previousDeliveries, rollcallConsumer } from 'rollcall/amqp';

import { client, work } from '../shared';

async function main(): Promise<void> {
  const connection = await amqp.connect(process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672');
  const channel = await connection.createChannel();
  // Done copies (options.queue) go on a confirm channel of a connection of their own: a RabbitMQ
  // under a memory or disk alarm stops reading connections that publish.
  const copying = await amqp.connect(process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672');
  const copyChannel = await copying.createConfirmChannel();
  // A lost connection is told on its `error` event, which would end the process unheard.
  for (const emitter of [connection, copying, copyChannel]) emitter.on('error', (error: Error) => console.error(error.message));
  await channel.assertQueue('thumbnails', { durable: true, arguments: { 'x-queue-type': 'quorum', 'x-delivery-limit': 6 } });
  await channel.prefetch(50);
  const watching = new Set<string>();
  const consume = rollcallConsumer(
    client,
    channel,
    async (message) => {
      const batchId = String(message.properties.headers?.['x-rollcall-item-id']).split(':')[0]!;
      if (!watching.has(batchId)) {
        watching.add(batchId);
        // Watching is a side show: a failed watch (a token without the read scope, a batch swept
        // since) is printed, and the consumer goes on.
        client
          .waitForCompletion(batchId, { timeoutMs: 600_000 })
          .then((b) => console.log(`batch ${b.id} is ${b.state}: ${b.succeeded} succeeded, ${b.failed} failed`))
          .catch((error: Error) => console.error(`cannot watch batch ${batchId}: ${error.message}`));
      }
      const { n } = JSON.parse(message.content.toString()) as { n: number };
      await work(n, previousDeliveries(message) === 0);
    },
    {
      maxDeliveries: 3,
      // A success rollcall could not be told of (an outage past retryForMs) is kept as a done copy
      // in this queue, not returned to count a delivery and run again.
      queue: 'thumbnails',
      copyChannel,
      onError: (error) => console.error(error.message),
      // The queue was deleted (or its node lost): nothing more will come; exit so a supervisor restarts us.
      onCancelled: () => {
        console.error('RabbitMQ cancelled the consumer');
        process.exit(1);
      },
    },
  );
  const { consumerTag } = await channel.consume('thumbnails', consume);
  console.log('consumer running; Ctrl-C to stop');
  // A graceful stop: no new deliveries, the ones in hand finish (rollcall, then the message), then close.
  process.once('SIGINT', () => {
    void (async () => {
      await channel.cancel(consumerTag);
      await consume.drain();
      await connection.close();
      await copying.close();
      process.exit(0);
    })().catch((error: unknown) => {
      console.error(error); // a channel already closed: its unsettled messages go back to the queue
      process.exit(1);
    });
  });
}

void main();
