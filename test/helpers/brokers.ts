/**
 * The message brokers the integration tests run on. `.ci/run` sets TEST_REDIS_URL and TEST_AMQP_URL
 * and fails when a broker does not answer; without them (a bare laptop) these tests are skipped.
 */
export const redisUrl = process.env.TEST_REDIS_URL;
export const amqpUrl = process.env.TEST_AMQP_URL;

/** `describe` when the variable is set, else `describe.skip`. */
export function describeWith(url: string | undefined): jest.Describe {
  return url ? describe : describe.skip;
}

/** ioredis connection options for BullMQ from a redis:// URL. */
export function redisConnection(url: string): { host: string; port: number; db: number; maxRetriesPerRequest: null } {
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port || 6379), db: Number(u.pathname.slice(1) || 0), maxRetriesPerRequest: null };
}
