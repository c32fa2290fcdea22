import { Knex } from 'knex';
import { Webhook } from 'standardwebhooks';

import { verifySignature } from '../../src/domain/delivery';
import { PostCallback } from '../../src/service/postCallback';
import { backends, describeEachOrSkip, serverBackends, withCitusForms } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { realSleep } from '../helpers/realTime';
import { Receiver } from '../helpers/receiver';
import { otherConnections } from '../helpers/rowLocks';
import { startReplica, startService, TestApp, TestService } from '../helpers/service';

const SECRET = 'test-secret-0123456789';

describe.each(withCitusForms(backends()))('completion callbacks (%s)', (_name, backend) => {
  let svc: TestService;
  let receiver: Receiver;
  beforeEach(async () => {
    receiver = new Receiver();
    await receiver.start();
    svc = await startService(backend, {
      CALLBACK_SECRET: SECRET,
      CALLBACK_BACKOFF_BASE: '1s',
      CALLBACK_BACKOFF_CAP: '1m',
      CALLBACK_MAX_AGE: '1h',
      CALLBACK_TIMEOUT: '2s',
    });
  });
  afterEach(async () => {
    await svc.stop();
    await receiver.stop();
  });

  async function completeBatchWithCallback(url = receiver.url) {
    const { id, ids } = await batchWith(svc.client, 2, { callbackUrl: url, userKey: 'cb' });
    expect((await svc.client.ack(ids)).completed).toHaveLength(1);
    return id;
  }

  it.each([
    ['a tab', 'http://exa\tmple.com/cb'],
    ['a line break', 'http://example.com/cb\n'],
    ['a surrounding space', ' http://example.com/cb'],
    ['a host name over 253 characters', `http://${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(62)}/cb`],
    // What zod's URL check takes and Node's URL parser does not (each answered 500 before).
    ['a port over 65535', 'http://a:99999/x'],
    ['a host of five numbers', 'http://1.2.3.4.5/x'],
    ['an empty punycode label', 'http://xn--/x'],
    ['a lone percent sign in the host', 'http://%/x'],
  ])('when a callbackUrl has %s, then 400 and no batch is made (it is not stored otherwise than sent)', async (_what, callbackUrl) => {
    const res = await svc.api.post('/v1/batches').send({ callbackUrl });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect((await svc.api.get('/v1/batches')).body.batches).toEqual([]);
  });

  it('when the host is a 253-character name with a port, then the URL is stored as sent and its completion writes its event', async () => {
    const host = `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(61)}`; // 253: DNS's longest
    const callbackUrl = `http://${host}:8080/cb?x=1`;
    const res = await svc.api.post('/v1/batches').send({ callbackUrl });
    expect(res.status).toBe(201);
    expect((await svc.api.get(`/v1/batches/${res.body.id}`)).body.callbackUrl).toBe(callbackUrl);
    const group = (await svc.api.post(`/v1/batches/${res.body.id}/items`).send({ count: 1 })).body.groups[0].id as string;
    await svc.api.post(`/v1/batches/${res.body.id}/seal`).send({});
    const acked = await svc.api.post('/v1/acks').send({ ids: [`${res.body.id}:${group}:0`] });
    expect([acked.status, acked.body.completed.length]).toEqual([200, 1]);
    expect((await svc.api.get(`/v1/batches/${res.body.id}/events`)).body.events).toHaveLength(1);
  });

  it('when a batch made before hosts were limited names a longer host, then the ack that completes it, and acks merged with it, still commit', async () => {
    const { id, ids } = await batchWith(svc.client, 2, { callbackUrl: receiver.url });
    const longHost = `http://${'a'.repeat(300)}.example.com/cb`;
    await svc.rollcall.db('batches').where('id', id).update({ callback_url: longHost });
    const others = await Promise.all([1, 2, 3].map(() => batchWith(svc.client, 1)));
    const answers = await Promise.all([svc.api.post('/v1/acks').send({ ids }), ...others.map((b) => svc.api.post('/v1/acks').send({ ids: b.ids }))]);
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200]);
    expect(answers[0]!.body.completed).toEqual([expect.objectContaining({ id })]);
    expect((await svc.api.get(`/v1/batches/${id}/events`)).body.events).toEqual([expect.objectContaining({ status: 'pending' })]);
  });

  it('when a batch made before URLs were checked as Node reads them names one Node refuses, then its completion still commits and its delivery fails as an attempt', async () => {
    const { id, ids } = await batchWith(svc.client, 1, { callbackUrl: receiver.url });
    await svc.rollcall.db('batches').where('id', id).update({ callback_url: 'http://example.com:99999/cb' }); // a port past 65535
    const acked = await svc.api.post('/v1/acks').send({ ids });
    expect([acked.status, acked.body.completed]).toEqual([200, [expect.objectContaining({ id })]]); // before: 500, every time
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1);
    const [event] = (await svc.api.get(`/v1/batches/${id}/events`)).body.events;
    expect(event).toMatchObject({ status: 'pending', attempts: 1, lastError: expect.any(String) });
  });

  it('when the shutdown has begun, then no callback attempt starts: the event of a batch completed during the drain waits for a replica or the next process', async () => {
    svc.rollcall.startBackground();
    svc.rollcall.beginShutdown();
    const id = await completeBatchWithCallback();
    await realSleep(1_500); // a completion wakes the loop at once; its poll is every second besides
    expect(receiver.deliveries).toHaveLength(0); // before: sent now, then cut off a second into close() and sent again elsewhere
    expect((await svc.api.get(`/v1/batches/${id}/events`)).body.events).toEqual([expect.objectContaining({ status: 'pending', attempts: 0 })]);
  });

  it('when the receiver answers 500 twice then 200, then it gets three signed attempts, one event id', async () => {
    receiver.script = [500, 500, 200];
    const id = await completeBatchWithCallback();
    const dispatcher = svc.rollcall.dispatcher;
    expect(await dispatcher.deliverDue()).toBe(1);
    expect(await dispatcher.deliverDue()).toBe(0); // backing off: not due yet
    svc.clock.now += 1000;
    expect(await dispatcher.deliverDue()).toBe(1);
    svc.clock.now += 2000;
    expect(await dispatcher.deliverDue()).toBe(1);
    svc.clock.now += 60_000;
    expect(await dispatcher.deliverDue()).toBe(0); // delivered: never again

    expect(receiver.deliveries).toHaveLength(3);
    const ids = new Set(receiver.deliveries.map((d) => d.headers['x-rollcall-event-id']));
    expect(ids.size).toBe(1);
    for (const d of receiver.deliveries) {
      expect(verifySignature(SECRET, d.body, d.headers['x-rollcall-signature'] as string)).toBe(true);
      expect(d.headers['content-type']).toBe('application/json');
    }
    const body = JSON.parse(receiver.deliveries[2]!.body);
    expect(body).toMatchObject({ event: 'batch.completed', batch: { id, state: 'complete', outcome: 'succeeded', total: 2, pending: 0, userKey: 'cb' } });
    const events = (await svc.api.get(`/v1/batches/${id}/events`)).body.events;
    expect(events).toEqual([expect.objectContaining({ id: [...ids][0], status: 'delivered', attempts: 3, lastError: null, nextAttemptAt: null })]);
  });

  it('when a receiver verifies with a Standard Webhooks library, then every attempt verifies, and a captured one sent again under another id or with a newer time does not', async () => {
    svc.clock.now = Date.now(); // the library checks the attempt's time against its own clock
    receiver.script = [500, 200];
    const id = await completeBatchWithCallback();
    await svc.rollcall.dispatcher.deliverDue();
    svc.clock.now += 1000;
    await svc.rollcall.dispatcher.deliverDue();
    const verifier = new Webhook(Buffer.from(SECRET).toString('base64'));
    const [first, second] = receiver.deliveries;
    for (const d of [first!, second!]) {
      expect(d.headers['webhook-id']).toBe(d.headers['x-rollcall-event-id']);
      expect(verifier.verify(d.body, d.headers as Record<string, string>)).toMatchObject({ event: 'batch.completed', batch: { id } });
    }
    expect(Number(second!.headers['webhook-timestamp'])).toBe(Math.floor(svc.clock.now / 1000)); // each attempt's own time
    const replay = { ...(first!.headers as Record<string, string>), 'webhook-id': '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b' };
    expect(() => verifier.verify(first!.body, replay)).toThrow('No matching signature found');
    // Sent again later, with its time made new to pass the receiver's tolerance: the time is signed too.
    const refreshed = { ...(first!.headers as Record<string, string>), 'webhook-timestamp': String(Number(first!.headers['webhook-timestamp']) + 1) };
    expect(() => verifier.verify(first!.body, refreshed)).toThrow('No matching signature found');
    expect(verifySignature(SECRET, first!.body, first!.headers['x-rollcall-signature'] as string)).toBe(true); // the contract's, as before
  });

  it('when delivery keeps failing, then events show the last error, and past the max age it is dead', async () => {
    receiver.fallback = 503;
    const id = await completeBatchWithCallback();
    await svc.rollcall.dispatcher.deliverDue();
    let [event] = (await svc.api.get(`/v1/batches/${id}/events`)).body.events;
    expect(event).toMatchObject({ status: 'pending', attempts: 1, lastError: 'http 503', firstAttemptAt: new Date(svc.clock.now).toISOString() });
    expect(Date.parse(event.nextAttemptAt)).toBeGreaterThanOrEqual(svc.clock.now + 500);
    svc.clock.now += 3_600_000;
    await svc.rollcall.dispatcher.deliverDue();
    [event] = (await svc.api.get(`/v1/batches/${id}/events`)).body.events;
    expect(event).toMatchObject({ status: 'dead', attempts: 2, lastError: 'http 503', nextAttemptAt: null });
    svc.clock.now += 3_600_000;
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(0);
    const counted = (await svc.api.get('/metrics')).text.match(/^rollcall_callback_deliveries_total\{result="\w+"\} [1-9]\d*$/gm);
    expect(counted).toEqual(['rollcall_callback_deliveries_total{result="failed"} 1', 'rollcall_callback_deliveries_total{result="dead"} 1']);
  });

  it('when the way callbacks are sent throws, then the attempt is recorded failed and retried, and the process goes on', async () => {
    const posted: string[] = [];
    const throwsOnce: PostCallback = (url) => {
      posted.push(url);
      if (posted.length === 1) throw new TypeError('a poster that throws at once'); // not even a rejected promise
      if (posted.length === 2) return Promise.reject(new TypeError('a poster that rejects'));
      return Promise.resolve(null);
    };
    const own = await startService(backend, { CALLBACK_BACKOFF_BASE: '1s' }, { postCallback: throwsOnce });
    try {
      const { id } = await batchWith(own.client, 0, { callbackUrl: receiver.url });
      await own.rollcall.dispatcher.deliverDue();
      let [event] = (await own.api.get(`/v1/batches/${id}/events`)).body.events;
      expect(event).toMatchObject({ status: 'pending', attempts: 1, lastError: 'connection failed' });
      own.clock.now += 60_000;
      await own.rollcall.dispatcher.deliverDue();
      [event] = (await own.api.get(`/v1/batches/${id}/events`)).body.events;
      expect(event).toMatchObject({ status: 'pending', attempts: 2, lastError: 'connection failed' });
      own.clock.now += 60_000;
      await own.rollcall.dispatcher.deliverDue();
      [event] = (await own.api.get(`/v1/batches/${id}/events`)).body.events;
      expect(event).toMatchObject({ status: 'delivered', attempts: 3 });
    } finally {
      await own.stop();
    }
  });

  it.each([
    ['a 2xx', null],
    ['a failure', 'http 503'],
  ])(
    'when an attempt outlasts its lease and another replica sends the event meanwhile, then the late attempt (%s) is counted unrecorded',
    async (_what, outcome) => {
      const peer: { replica?: TestApp; sent?: number } = {};
      const outlastsItsLease: PostCallback = async () => {
        own.clock.now += 60_000; // past the 7 s lease: the replica claims the event and delivers it
        peer.sent = await peer.replica?.rollcall.dispatcher.deliverDue(); // asserted below: a throw here would be taken for the POST's
        return outcome;
      };
      const own = await startService(backend, { CALLBACK_TIMEOUT: '2s' }, { postCallback: outlastsItsLease });
      const replica = (peer.replica = await startReplica(own));
      try {
        const { id } = await batchWith(own.client, 0, { callbackUrl: receiver.url });
        await own.rollcall.dispatcher.deliverDue();
        expect(peer.sent).toBe(1);
        expect(receiver.deliveries).toHaveLength(1);
        expect((await own.api.get(`/v1/batches/${id}/events`)).body.events).toMatchObject([{ status: 'delivered', attempts: 2 }]);
        const counted = async (app: TestApp) => (await app.api.get('/metrics')).text.match(/^rollcall_callback_deliveries_total\{result="\w+"\} [1-9]\d*$/gm);
        expect(await counted(own)).toEqual(['rollcall_callback_deliveries_total{result="unrecorded"} 1']);
        expect(await counted(replica)).toEqual(['rollcall_callback_deliveries_total{result="delivered"} 1']);
      } finally {
        await replica.stop();
        await own.stop();
      }
    },
  );

  it('when an event was tried by a replica older than migration 0019, then its age still counts from its creation', async () => {
    receiver.fallback = 503;
    const triedByOld = await completeBatchWithCallback();
    const untried = await completeBatchWithCallback();
    await svc.rollcall.db('outbox').where('batch_id', triedByOld).update({ attempts: 2 }); // as an older replica leaves it: no first attempt
    svc.clock.now += 2 * 3_600_000; // past CALLBACK_MAX_AGE since their creation
    await svc.rollcall.dispatcher.deliverDue();
    const statusOf = async (id: string) => (await svc.api.get(`/v1/batches/${id}/events`)).body.events[0];
    expect(await statusOf(triedByOld)).toMatchObject({ status: 'dead', attempts: 3 });
    expect(await statusOf(untried)).toMatchObject({ status: 'pending', attempts: 1 }); // its first attempt: its whole age ahead
  });

  it('when the backoff would reach past CALLBACK_MAX_AGE, then the last try comes as the age ends, and its failure gives the event up', async () => {
    const patient = await startService(backend, { CALLBACK_BACKOFF_BASE: '10h', CALLBACK_BACKOFF_CAP: '30d', CALLBACK_MAX_AGE: '1h' });
    try {
      receiver.fallback = 503;
      const { id } = await batchWith(patient.client, 0, { callbackUrl: receiver.url });
      const firstAt = patient.clock.now;
      expect(await patient.rollcall.dispatcher.deliverDue()).toBe(1);
      const eventOf = async () => (await patient.api.get(`/v1/batches/${id}/events`)).body.events[0];
      expect(await eventOf()).toMatchObject({ status: 'pending', attempts: 1, nextAttemptAt: new Date(firstAt + 3_600_000).toISOString() });
      patient.clock.now = firstAt + 3_600_000;
      expect(await patient.rollcall.dispatcher.deliverDue()).toBe(1);
      expect(await eventOf()).toMatchObject({ status: 'dead', attempts: 2 });
    } finally {
      await patient.stop();
    }
  });

  it('when the receiver is unreachable, then the network error is recorded and retried', async () => {
    const id = await completeBatchWithCallback('http://127.0.0.1:9/unreachable');
    await svc.rollcall.dispatcher.deliverDue();
    const [event] = (await svc.api.get(`/v1/batches/${id}/events`)).body.events;
    expect(event.status).toBe('pending');
    expect(event.lastError).toBe('connection failed');
  });

  it('when the receiver answers 101 Switching Protocols (to another protocol), then the attempt fails as http 101 and is retried, not left under way for ever', async () => {
    receiver.script = ['upgrade'];
    const id = await completeBatchWithCallback();
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1); // before: never returned
    const [event] = (await svc.api.get(`/v1/batches/${id}/events`)).body.events;
    expect(event).toMatchObject({ status: 'pending', attempts: 1, lastError: 'http 101' });
    svc.clock.now += 1000;
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1);
    expect((await svc.api.get(`/v1/batches/${id}/events`)).body.events[0]).toMatchObject({ status: 'delivered', attempts: 2 });
  });

  it('when the receiver does not answer in time, then the attempt fails as timed out and is retried', async () => {
    const slow = await startService(backend, { CALLBACK_TIMEOUT: '300ms', CALLBACK_BACKOFF_BASE: '1s' });
    try {
      receiver.script = ['hang'];
      const { id } = await batchWith(slow.client, 0, { callbackUrl: receiver.url });
      const started = Date.now();
      expect(await slow.rollcall.dispatcher.deliverDue()).toBe(1);
      expect(Date.now() - started).toBeLessThan(10_000);
      const [event] = (await slow.api.get(`/v1/batches/${id}/events`)).body.events;
      expect(event).toMatchObject({ status: 'pending', attempts: 1, lastError: 'timeout' });
      slow.clock.now += 1000;
      expect(await slow.rollcall.dispatcher.deliverDue()).toBe(1);
      expect((await slow.api.get(`/v1/batches/${id}/events`)).body.events[0]).toMatchObject({ status: 'delivered', attempts: 2 });
    } finally {
      await slow.stop();
    }
  });

  it('when the seal completes a batch with a callback, then it is sent too; without a URL, none is', async () => {
    const withUrl = (await batchWith(svc.client, 0, { callbackUrl: receiver.url })).id;
    const without = (await batchWith(svc.client, 0)).id;
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1);
    expect(JSON.parse(receiver.deliveries[0]!.body).batch.id).toBe(withUrl);
    expect((await svc.api.get(`/v1/batches/${without}/events`)).body.events).toEqual([]);
  });

  it('when a batch with a pending callback is deleted, then the callback is gone too', async () => {
    const id = await completeBatchWithCallback();
    expect((await svc.api.delete(`/v1/batches/${id}`)).status).toBe(204);
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(0);
    expect(receiver.deliveries).toHaveLength(0);
  });

  it('when two replicas deliver at the same time, then each event is sent once', async () => {
    const replica = await startReplica(svc);
    try {
      const ids = [];
      for (let i = 0; i < 12; i++) ids.push(await completeBatchWithCallback());
      const [a, b] = await Promise.all([svc.rollcall.dispatcher.deliverDue(), replica.rollcall.dispatcher.deliverDue()]);
      expect(a + b).toBe(12);
      expect(receiver.deliveries).toHaveLength(12);
      expect(new Set(receiver.deliveries.map((d) => d.headers['x-rollcall-event-id'])).size).toBe(12);
    } finally {
      await replica.stop();
    }
  });
});

describeEachOrSkip(serverBackends())('completion callbacks whose claim waits for a row (%s)', (_name, backend) => {
  let svc: TestService;
  let receiver: Receiver;
  let holder: Knex;
  beforeAll(async () => {
    receiver = new Receiver();
    await receiver.start();
    // A lease of 1 s + 5 s; a claim may wait up to 8 s for a row.
    svc = await startService(backend, { CALLBACK_TIMEOUT: '1s', LOCK_TIMEOUT: '8s', DB_QUERY_TIMEOUT: '20s' });
    holder = otherConnections(svc.database, 1);
  });
  afterAll(async () => {
    await holder.destroy();
    await svc.stop();
    await receiver.stop();
  });

  it('when the claim outlasts the lease, then no POST is sent on it (another replica may hold the event by then); the next claim sends it', async () => {
    const { id, ids } = await batchWith(svc.client, 1, { callbackUrl: receiver.url });
    await svc.client.ack(ids);
    const trx = await holder.transaction();
    await trx('outbox').where('batch_id', id).forUpdate();
    const claiming = svc.rollcall.dispatcher.deliverDue();
    await realSleep(6_500); // past the 6 s lease, measured from before the claim
    await trx.rollback();
    await claiming;
    expect(receiver.deliveries).toHaveLength(0);
    expect((await svc.api.get('/metrics')).text).toContain('rollcall_callback_deliveries_total{result="unrecorded"} 1');
    svc.clock.now += 10_000; // the lease is over: the event is due again
    expect(await svc.rollcall.dispatcher.deliverDue()).toBe(1);
    expect(receiver.deliveries).toHaveLength(1);
  }, 30_000);
});
