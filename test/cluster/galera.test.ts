import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';

import mysql from 'mysql2/promise';

import { migrations } from '../../migrations';
import { loadConfig } from '../../src/config';
import { createRollcall } from '../../src/rollcall';
import { batchWith } from '../helpers/batches';
import { GaleraCluster } from '../helpers/galeraCluster';
import { chunks, serve, shuffled, TestApp } from '../helpers/service';

/**
 * rollcall on a real 3-node MariaDB Galera cluster of this file's own (private ports, rsync SST),
 * with replicas on different nodes (multi-primary) and behind HAProxy (one writer, two backups).
 * Runs when TEST_GALERA=1 (.ci/run sets it after installing galera-4, haproxy and rsync).
 */
const enabled = process.env.TEST_GALERA === '1';
const maybe = enabled ? describe : describe.skip;

jest.setTimeout(240_000);

type Replica = TestApp;
type Api = Replica['api'];

/** Counted exactly once per batch: the batch.completed callback event its completing transaction wrote. */
const CALLBACK = 'http://receiver.invalid/hook';
const WITH_CALLBACK = { callbackUrl: CALLBACK };

async function startReplicas(urls: string[], env: Record<string, string> = {}): Promise<Replica[]> {
  // All at once: concurrent start (and migrations) on different nodes is part of what is tested.
  return Promise.all(
    urls.map(async (url) => {
      return serve(await createRollcall(loadConfig({ LOG_LEVEL: 'silent', DATABASE_URL: url, WAIT_POLL_INTERVAL: '50ms', ...env })));
    }),
  );
}

const stopAll = (replicas: Replica[]) => Promise.all(replicas.map((r) => r.stop()));

async function completedEvents(url: string, batchId: string): Promise<number> {
  const conn = await mysql.createConnection({ uri: url });
  try {
    await conn.query('SET SESSION wsrep_sync_wait = 1'); // see what other nodes committed
    const [rows] = await conn.query("SELECT COUNT(*) AS n FROM outbox WHERE batch_id = ? AND event = 'batch.completed'", [batchId]);
    return Number((rows as Array<{ n: number }>)[0]?.n);
  } finally {
    await conn.end();
  }
}

interface AckTally {
  acked: number;
  duplicates: number;
  completions: number;
  unavailable: number;
  statuses: Set<number>;
}

/** Acks `ids` through `api`, again after a 503 (what a client does with Retry-After). Never a 5xx other than 503. */
async function ackUntilAnswered(api: Api, ids: string[], tally: AckTally): Promise<void> {
  for (;;) {
    const res = await api.post('/v1/acks').send({ ids });
    tally.statuses.add(res.status);
    if (res.status === 503) {
      tally.unavailable += 1;
      await new Promise((r) => setTimeout(r, 5 + Math.random() * 20));
      continue;
    }
    expect(res.status).toBe(200);
    tally.acked += res.body.acked;
    tally.duplicates += res.body.duplicates;
    tally.completions += res.body.completed.length;
    return;
  }
}

const newTally = (): AckTally => ({ acked: 0, duplicates: 0, completions: 0, unavailable: 0, statuses: new Set() });

maybe('rollcall on a MariaDB Galera cluster', () => {
  const cluster = new GaleraCluster();
  let dbName = '';
  let urls: string[] = [];
  let replicas: Replica[] = [];

  beforeAll(async () => {
    // Fails, never skips, when the cluster cannot start (TEST_GALERA=1 says it must).
    if (!GaleraCluster.available()) throw new Error('TEST_GALERA=1 but mariadbd, galera-4 or rsync is missing');
    const started = Date.now();
    await cluster.start(3);
    await cluster.startHaproxy();
    console.log(`Galera cluster of 3 nodes and HAProxy up in ${Date.now() - started} ms`);
    dbName = `rollcall_${randomBytes(4).toString('hex')}`;
    await cluster.createDatabase(dbName);
    urls = cluster.nodes.map((n) => n.url(dbName));
  }, 240_000);

  afterAll(async () => {
    await stopAll(replicas);
    await cluster.stop();
  });

  it('when three replicas start at once on three nodes, then all come up and each migration ran once', async () => {
    replicas = await startReplicas(urls);
    const conn = await mysql.createConnection({ uri: urls[2] as string });
    try {
      await conn.query('SET SESSION wsrep_sync_wait = 1');
      const [rows] = await conn.query('SELECT name FROM rollcall_migrations ORDER BY id');
      expect((rows as Array<{ name: string }>).map((r) => r.name)).toEqual(migrations.map(([name]) => name));
      const [sync] = await conn.query('SELECT @@global.wsrep_on AS wsrep_on');
      expect((sync as Array<{ wsrep_on: number }>)[0]?.wsrep_on).toBe(1);
    } finally {
      await conn.end();
    }
    for (const replica of replicas) expect((await replica.api.get('/readyz')).status).toBe(200);
  });

  it('when the seal races the last acks on other nodes, 30 times, then each batch completes exactly once', async () => {
    const [a, b, c] = replicas as [Replica, Replica, Replica];
    for (let round = 0; round < 30; round++) {
      const { id, ids } = await batchWith(a.client, 4, { ...WITH_CALLBACK, sealed: false });
      const tally = newTally();
      await ackUntilAnswered(b.api, ids.slice(0, 2), tally);
      const [seal] = await Promise.all([
        a.api.post(`/v1/batches/${id}/seal`),
        ackUntilAnswered(b.api, [ids[2] as string], tally),
        ackUntilAnswered(c.api, [ids[3] as string], tally),
      ]);
      expect(seal.status).toBe(200);
      // Only this seal can seal the batch: its answer is complete only when its own transaction completed it.
      const completions = tally.completions + (seal.body.state === 'complete' ? 1 : 0);
      if (completions !== 1)
        console.log(
          JSON.stringify({
            round,
            seal: seal.body,
            tally: { ...tally, statuses: [...tally.statuses] },
            events: await completedEvents(urls[0] as string, id),
            status: (await c.api.get(`/v1/batches/${id}`)).body,
          }),
        );
      expect({ round, completions }).toEqual({ round, completions: 1 });
      expect(await completedEvents(urls[round % 3] as string, id)).toBe(1);
      expect((await c.api.get(`/v1/batches/${id}`)).body).toMatchObject({ state: 'complete', succeeded: 4, pending: 0 });
    }
  });

  it('when another node writes the batch while a seal that waited its turn is between its last statement and COMMIT, then the seal is run again, never answered sealed unwritten', async () => {
    const [a] = replicas as [Replica];
    const { id } = await batchWith(a.client, 2, { sealed: false });
    const sqlOn = (node: number, sql: string) =>
      execFileSync('mariadb', ['-h127.0.0.1', `-P${cluster.nodes[node]!.ports.sql}`, '-uroot', dbName, '-e', sql], { encoding: 'utf8' });
    // The seal waits for its turn behind an add that waits for the batch row, held here: a seal
    // whose turn came late sets a shorter lock wait, and sets it back after its work.
    const holder = await mysql.createConnection({ uri: urls[0] as string });
    let abortedBetween = false;
    let shorterWaitSet = false; // the path under test: the seal's turn came late
    const onQuery = (query: { sql: string }) => {
      if (query.sql.startsWith('SET SESSION innodb_lock_wait_timeout') && !abortedBetween) shorterWaitSet = true;
    };
    const onResponse = (_response: unknown, query: { sql: string; bindings?: unknown[] }) => {
      if (abortedBetween || !/^update `batches`/.test(query.sql) || query.bindings?.[0] !== 'sealed' || !query.bindings.includes(id)) return;
      abortedBetween = true;
      // The seal's UPDATE is answered; before this process sends its next statement, node 2 commits
      // a write of the same row, and node 1 applies it (the causal read waits for that), aborting
      // the seal's transaction there.
      sqlOn(1, `SET SESSION wsrep_sync_wait = 3; UPDATE batches SET updated_at = updated_at + 1 WHERE id = '${id}'`);
      sqlOn(0, `SET SESSION wsrep_sync_wait = 1; SELECT updated_at FROM batches WHERE id = '${id}'`);
    };
    a.rollcall.db.on('query-response', onResponse);
    a.rollcall.db.on('query', onQuery);
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT id FROM batches WHERE id = ? FOR UPDATE', [id]);
      const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
      const added = Promise.resolve(a.api.post(`/v1/batches/${id}/items`).send({ count: 1 }));
      await pause(150); // the add has the batch's turn, waiting for the row
      const sealed = Promise.resolve(a.api.post(`/v1/batches/${id}/seal`));
      await pause(300);
      await holder.query('COMMIT');
      const [add, seal] = await Promise.all([added, sealed]);
      expect(add.status).toBe(201);
      expect({ abortedBetween, shorterWaitSet }).toEqual({ abortedBetween: true, shorterWaitSet: true });
      expect({ status: seal.status, state: seal.body.state }).toEqual({ status: 200, state: 'sealed' });
      for (const node of [0, 1, 2]) expect(sqlOn(node, `SET SESSION wsrep_sync_wait = 1; SELECT state FROM batches WHERE id = '${id}'`)).toContain('sealed');
    } finally {
      a.rollcall.db.off('query-response', onResponse);
      a.rollcall.db.off('query', onQuery);
      await holder.end();
    }
  });

  it('when 24 clients ack every item twice across three nodes, then counts are exact, one completion', async () => {
    const count = 1200;
    const { id, ids } = await batchWith(replicas[0]!.client, count, WITH_CALLBACK);
    // Every item twice, in two different shuffles, dealt to 24 clients in calls of 10 IDs.
    const calls = [...chunks(shuffled(ids, 1), 10), ...chunks(shuffled(ids, 2), 10)];
    const tally = newTally();
    const started = Date.now();
    await Promise.all(
      Array.from({ length: 24 }, async (_, client) => {
        const api = replicas[client % 3]!.api;
        for (let i = client; i < calls.length; i += 24) await ackUntilAnswered(api, calls[i] as string[], tally);
      }),
    );
    const seconds = (Date.now() - started) / 1000;
    console.log(
      `multi-primary storm: ${calls.length} ack calls (${2 * count} IDs) in ${seconds.toFixed(1)} s = ${(calls.length / seconds).toFixed(0)} calls/s; 503s retried: ${tally.unavailable}`,
    );
    expect([...tally.statuses].every((s) => s === 200 || s === 503)).toBe(true);
    expect({ acked: tally.acked, duplicates: tally.duplicates, completions: tally.completions }).toEqual({ acked: count, duplicates: count, completions: 1 });
    expect(await completedEvents(urls[1] as string, id)).toBe(1);
    for (const replica of replicas)
      expect((await replica.api.get(`/v1/batches/${id}`)).body).toMatchObject({ state: 'complete', succeeded: count, pending: 0 });
  });

  it('when an ack is answered on one node, then a status read and a wait on the next node see it at once', async () => {
    const count = 60;
    const { id, ids } = await batchWith(replicas[0]!.client, count, WITH_CALLBACK);
    for (let i = 0; i < count - 1; i++) {
      const writer = replicas[i % 3]!;
      const reader = replicas[(i + 1) % 3]!;
      expect((await writer.api.post('/v1/acks').send({ ids: [ids[i]] })).body.acked).toBe(1);
      expect({ i, succeeded: (await reader.api.get(`/v1/batches/${id}`)).body.succeeded }).toEqual({ i, succeeded: i + 1 });
    }
    expect((await replicas[2]!.api.post('/v1/acks').send({ ids: [ids[count - 1]] })).body.completed).toHaveLength(1);
    const started = Date.now();
    const waited = await replicas[0]!.api.get(`/v1/batches/${id}/wait?timeout=10`);
    expect(waited.body).toMatchObject({ state: 'complete', pending: 0 });
    expect(Date.now() - started).toBeLessThan(2000);
  });

  it('when retries run out under conflicts between nodes, then 503, never 500, and counts stay exact', async () => {
    const strict = await startReplicas(urls, { TX_RETRIES: '0', ACK_GROUP_COMMIT: 'off' });
    try {
      const count = 300;
      const { ids } = await batchWith(strict[0]!.client, count, WITH_CALLBACK);
      const calls = chunks(shuffled(ids, 3), 2);
      const tally = newTally();
      await Promise.all(
        Array.from({ length: 12 }, async (_, client) => {
          for (let i = client; i < calls.length; i += 12) await ackUntilAnswered(strict[client % 3]!.api, calls[i] as string[], tally);
        }),
      );
      console.log(`no retries, 12 clients on 3 nodes: ${tally.unavailable} answers were 503 (certification conflicts), none 500`);
      expect([...tally.statuses].sort()).toEqual(tally.unavailable > 0 ? [200, 503] : [200]);
      expect({ acked: tally.acked, duplicates: tally.duplicates, completions: tally.completions }).toEqual({ acked: count, duplicates: 0, completions: 1 });
    } finally {
      await stopAll(strict);
    }
  });

  it('when the writer behind HAProxy is killed mid-storm, then nothing answered is lost, one completion', async () => {
    const proxied = `mysql://root@127.0.0.1:${cluster.haproxyPort}/${dbName}`;
    const behind = await startReplicas([proxied, proxied]);
    try {
      const count = 2000;
      const { id, ids } = await batchWith(behind[0]!.client, count, WITH_CALLBACK);
      const calls = chunks(shuffled(ids, 4), 10);
      const answered = new Set<string>();
      let killedAt = 0;
      let firstAnswerAfterKill = 0;
      const errors = new Map<number, number>();
      let done = 0;
      const started = Date.now();
      await Promise.all(
        Array.from({ length: 8 }, async (_, client) => {
          for (let i = client; i < calls.length; i += 8) {
            for (;;) {
              const res = await behind[client % 2]!.api.post('/v1/acks').send({ ids: calls[i] });
              if (res.status === 200) {
                if (killedAt && !firstAnswerAfterKill) firstAnswerAfterKill = Date.now();
                for (const itemId of calls[i] as string[]) answered.add(itemId);
                break;
              }
              errors.set(res.status, (errors.get(res.status) ?? 0) + 1);
              expect(res.status).toBe(503); // a lost connection is 503 too, never 500
              await new Promise((r) => setTimeout(r, 50));
            }
            if (++done === Math.floor(calls.length / 3)) {
              killedAt = Date.now();
              void cluster.nodes[0]!.kill('SIGKILL');
            }
          }
        }),
      );
      const seconds = (Date.now() - started) / 1000;
      console.log(
        `single writer behind HAProxy: ${calls.length} ack calls in ${seconds.toFixed(1)} s, writer killed after ${Math.floor(calls.length / 3)}; ` +
          `serving again ${firstAnswerAfterKill - killedAt} ms after the kill; non-200 answers: ${JSON.stringify([...errors])}`,
      );
      expect(answered.size).toBe(count);
      const status = (await behind[1]!.api.get(`/v1/batches/${id}`)).body;
      expect(status).toMatchObject({ state: 'complete', succeeded: count, pending: 0 });
      expect(await completedEvents(urls[1] as string, id)).toBe(1);
      expect(await completedEvents(urls[2] as string, id)).toBe(1);
    } finally {
      await stopAll(behind);
    }
  });
});
