import vm from 'node:vm';

import { toError } from '../../src/domain/errors';
import { isLockTimeout, isRetryable, isUnavailable } from '../../src/store/dbErrors';

describe('errors', () => {
  it('when an Error from another realm is caught, then it is kept as it is, not wrapped', () => {
    const foreign = vm.runInNewContext('new Error("from elsewhere")') as Error;
    expect(toError(foreign)).toBe(foreign);
  });

  it('when a non-error is thrown, then it becomes an Error with the original as cause', () => {
    const error = toError({ weird: true });
    expect(error).toBeInstanceOf(Error);
    expect(error.cause).toEqual({ weird: true });
    expect(toError('text').message).toBe('text');
  });

  it.each(['ER_LOCK_DEADLOCK', 'SQLITE_BUSY_SNAPSHOT', 'SQLITE_LOCKED', '40P01', '40001'])(
    'when the database aborts with %s, then the transaction is retryable',
    (code) => expect(isRetryable({ code })).toBe(true),
  );

  it.each(['ER_DUP_ENTRY', 'SQLITE_CONSTRAINT', 'ER_LOCK_WAIT_TIMEOUT', 'SQLITE_BUSY', '23505', '55P03', undefined])(
    'when it fails with %s, then it is not retried',
    (code) => {
      expect(isRetryable({ code })).toBe(false);
    },
  );

  it.each(['ER_LOCK_WAIT_TIMEOUT', 'SQLITE_BUSY', '55P03'])('when a lock wait ends with %s, then it is a lock timeout (503, not retried)', (code) => {
    expect(isLockTimeout({ code })).toBe(true);
  });

  it('when the connection is refused or lost, then the database counts as unavailable', () => {
    expect(isUnavailable({ code: 'ECONNREFUSED' })).toBe(true);
    expect(isUnavailable({ code: 'PROTOCOL_CONNECTION_LOST' })).toBe(true);
    expect(isUnavailable({ name: 'KnexTimeoutError' })).toBe(true);
    expect(isUnavailable({ code: 'ER_DUP_ENTRY' })).toBe(false);
  });

  it('when PostgreSQL shuts down or its connection is lost, then the database counts as unavailable', () => {
    for (const code of ['57P01', '57P03', '08006', '3D000']) expect(isUnavailable({ code })).toBe(true);
    expect(isUnavailable(new Error('ROLLBACK - Connection terminated unexpectedly'))).toBe(true);
    // pg's connectionTimeoutMillis, against a host that takes the connection and says nothing (was 500).
    expect(isUnavailable(new Error('timeout expired'))).toBe(true);
    expect(isUnavailable(new Error('Connection terminated unexpectedly, or so a user wrote'))).toBe(false);
    expect(isUnavailable({ code: '23505', message: 'Connection terminated unexpectedly' })).toBe(false);
  });
});
