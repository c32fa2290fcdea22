/** Opens a batch of 1,000 items and publishes one message per item to the quorum queue "thumbnails". */
import amqp from 'amqplib';
import { openBatch } from 'rollcall/producer';

import { client } from '../shared';

async function main(): Promise<void> {
  const connection = await amqp.connect(process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672');
  const channel = await connection.createConfirmChannel();
  // A quorum queue counts deliveries (x-delivery-count), which tells the consumer its last try.
  await channel.assertQueue('thumbnails', { durable: true, arguments: { 'x-queue-type': 'quorum', 'x-delivery-limit': 6 } });
  let n = 0;
  const batch = await openBatch(client, {
    count: 1000,
    userKey: 'thumbnails-example',
    enqueue: async (itemIds) => {
      for (const id of itemIds) {
        channel.sendToQueue('thumbnails', Buffer.from(JSON.stringify({ n: n++ })), { persistent: true, headers: { 'x-rollcall-item-id': id } });
      }
      await channel.waitForConfirms(); // the chunk is on the broker before the next one is made
    },
  });
  console.log(`batch ${batch.id}: ${batch.total} messages published, ${batch.state}`);
  await connection.close();
}

void main();
