import { toError } from '../domain/errors';
import { asUnavailable } from '../store/transaction';

/** Runs a read, turning "database not answering" into UnavailableError. */
export async function reading<T>(read: () => Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (caught) {
    throw asUnavailable(toError(caught));
  }
}
