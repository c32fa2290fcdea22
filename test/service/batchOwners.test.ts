import { callFromIds } from '../../src/domain/ackCall';
import { BatchOwners } from '../../src/service/batchOwners';
import { backends } from '../helpers/backends';
import { batchWith } from '../helpers/batches';
import { startService, TestService } from '../helpers/service';

const TOKENS = [
  { token: 'tenant-a-token-0123456789', tenant: 'a', scopes: ['produce', 'consume'] },
  { token: 'tenant-b-token-0123456789', tenant: 'b', scopes: ['produce', 'consume'] },
];

/** Which targets of tenant a's call `owners` marks as another tenant's. */
async function foreignOf(owners: BatchOwners, ids: string[]): Promise<string[]> {
  const call = callFromIds(ids, 'succeeded', 'a');
  await owners.screen(call);
  return call.targets.filter((t) => t.foreign).map((t) => t.batchId);
}

describe.each(backends())('whose batches an ack call names, as one process remembers (%s)', (_name, backend) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService(backend, { API_TOKENS: JSON.stringify(TOKENS) });
  });
  afterAll(() => svc.stop());

  it("when a call's read of one batch makes the process forget another it named, then that other is still marked", async () => {
    const ofB = await batchWith(svc.clientWith(TOKENS[1]!.token), 2);
    const alsoOfB = await batchWith(svc.clientWith(TOKENS[1]!.token), 2);
    const owners = new BatchOwners(svc.rollcall.deps, 1); // remembers one answer
    expect(await foreignOf(owners, [ofB.ids[0]!])).toEqual([ofB.id]);

    // ofB is known; alsoOfB is read, and remembering it forgets ofB before the call is marked.
    expect((await foreignOf(owners, [ofB.ids[1]!, alsoOfB.ids[0]!])).sort()).toEqual([ofB.id, alsoOfB.id].sort());
  });

  it("when a batch is the caller's own or names none, then it is not marked, and the caller's own stays unmarked from memory", async () => {
    const ofA = await batchWith(svc.clientWith(TOKENS[0]!.token), 2);
    const owners = new BatchOwners(svc.rollcall.deps);
    const madeUp = `${'0'.repeat(8)}-0000-7000-8000-${'0'.repeat(12)}:${'0'.repeat(8)}-0000-7000-8000-${'0'.repeat(12)}:0`;
    expect(await foreignOf(owners, [ofA.ids[0]!, madeUp])).toEqual([]);
    const call = callFromIds([ofA.ids[1]!], 'succeeded', 'a');
    expect(owners.screen(call)).toBeNull(); // known: no read
    expect(call.targets[0]!.foreign).toBeUndefined();
  });
});
