import { Writable } from 'node:stream';

import express from 'express';
import pino from 'pino';
import request from 'supertest';

import { UnavailableError } from '../../src/domain/errors';
import { errorHandler } from '../../src/http/errorHandler';
import { requestContext } from '../../src/http/requestContext';

/**
 * A 503 is a refusal too: while the database is away every caller gets one, and a tenant past its
 * share of the ack queue gets them at once, thousands a second. The log keeps one warning a second
 * per tenant and code, with its error, and the rest at debug, as for 429s.
 */
describe('the log of a flood of 503 answers', () => {
  const lines: Array<{ level: number; msg: string; code?: string; tenant?: string; err?: { message: string } }> = [];
  const app = express();
  app.use(requestContext(app, pino({ level: 'info' }, new Writable({ write: (chunk, _enc, done) => (lines.push(JSON.parse(String(chunk))), done()) }))));
  app.get('/busy/:tenant', (req, _res, next) => {
    req.caller = { tenant: String(req.params.tenant) };
    next(new UnavailableError('more than 5000 acked IDs of this tenant are waiting for the database in this process; try again'));
  });
  app.use(errorHandler());

  it('then each tenant has one warning a second, naming it and the error, and every caller still has its 503', async () => {
    const answers = [];
    for (let i = 0; i < 20; i++) answers.push(await request(app).get(`/busy/${i % 2 === 0 ? 'a' : 'b'}`));

    expect(new Set(answers.map((res) => `${res.status} ${res.body.error.code} ${res.headers['retry-after']}`))).toEqual(new Set(['503 unavailable 1']));
    const warnings = lines.filter((line) => line.msg === 'request answered 503');
    expect(warnings.map(({ level, code, tenant }) => ({ level, code, tenant }))).toEqual([
      { level: 40, code: 'unavailable', tenant: 'a' },
      { level: 40, code: 'unavailable', tenant: 'b' },
    ]);
    expect(warnings[0]!.err!.message).toContain('waiting for the database');
  });
});
