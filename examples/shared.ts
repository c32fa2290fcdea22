import { RollcallClient } from 'rollcall/client';

export const client = new RollcallClient({
  baseUrl: process.env.ROLLCALL_URL ?? 'http://127.0.0.1:8080',
  token: process.env.ROLLCALL_TOKEN,
});

/** Where the BullMQ example's Redis is. */
export const redis = { host: process.env.REDIS_HOST ?? '127.0.0.1', port: Number(process.env.REDIS_PORT ?? 6379) };

/** The examples' "work": every 100th item fails for good, every 7th fails on its first try only. */
export async function work(n: number, firstTry: boolean): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, 5));
  if (n % 100 === 99) throw new Error(`item ${n}: the input is broken`);
  if (n % 7 === 6 && firstTry) throw new Error(`item ${n}: a hiccup`);
}
