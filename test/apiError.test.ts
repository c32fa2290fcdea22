import { RollcallApiError } from '../src/client';
import { isTransient } from '../src/client/retry';

/** RollcallApiError as another copy of the package defines it (two versions installed). */
async function anotherCopysClass(): Promise<typeof RollcallApiError> {
  let other: typeof RollcallApiError | undefined;
  await jest.isolateModulesAsync(async () => {
    other = (await import('../src/client/apiError')).RollcallApiError;
  });
  return other!;
}

describe('RollcallApiError', () => {
  it('when an API error comes from another copy of the package, then it is still a RollcallApiError, and a 404 is not sent again', async () => {
    const Other = await anotherCopysClass();
    expect(Other).not.toBe(RollcallApiError);
    const notFound = new Other(404, 'batch_not_found', 'no batch with that id');
    expect(notFound).toBeInstanceOf(RollcallApiError);
    // Told by class, it was taken for a network error: retried for ~30 s, and the producer's rerun never found its child.
    expect(isTransient(notFound)).toBe(false);
    expect(isTransient(new Other(503, 'unavailable', 'the database is away'))).toBe(true);
  });

  it('when an error is not an API error, or a subclass is asked, then instanceof answers as by class', () => {
    expect(new Error('a network error')).not.toBeInstanceOf(RollcallApiError);
    expect(Object.assign(new Error('looks alike'), { name: 'RollcallApiError', status: 404, code: 'x' })).not.toBeInstanceOf(RollcallApiError);
    expect(null).not.toBeInstanceOf(RollcallApiError);
    expect({ ...new RollcallApiError(404, 'batch_not_found', 'gone') }).not.toBeInstanceOf(RollcallApiError); // a copy is no error
    class Narrower extends RollcallApiError {}
    expect(new Narrower(409, 'batch_not_open', 'sealed')).toBeInstanceOf(Narrower);
    expect(new Narrower(409, 'batch_not_open', 'sealed')).toBeInstanceOf(RollcallApiError);
    expect(new RollcallApiError(409, 'batch_not_open', 'sealed')).not.toBeInstanceOf(Narrower);
  });
});
