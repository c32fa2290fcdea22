/**
 * The recent failures of a BullMQ queue, read a page at a time from its failed set (newest first)
 * while other processes change it: the failure watch's look-back at a Worker's start.
 */

/** What the look-back needs of a failed job. */
export interface FailedJob {
  /** When BullMQ moved it to failed; none once it was retried since it was listed. */
  finishedOn?: number;
}

/** The failed set as BullMQ shows it (a Queue's `getRanges(['failed'], …)` and `getJob`). */
export interface FailedSet<J extends FailedJob> {
  /** The job IDs at these positions (newest first, both ends included), read at one moment. */
  idsAt(start: number, end: number): Promise<string[]>;
  /** The jobs of these IDs, `undefined` for one removed since. */
  jobsOf(ids: string[]): Promise<Array<J | undefined>>;
}

/** Job IDs read at once. */
export const RECOVERY_PAGE = 200;

/**
 * How many positions each page reaches back into the one before, at least and at most. Up to that
 * many jobs that were read may leave the set between two reads (a retry from a dashboard, a
 * removal) without a page being read again; it grows with how far the set is seen to move.
 */
const MIN_OVERLAP = 25;
const MAX_OVERLAP = RECOVERY_PAGE - MIN_OVERLAP;

/**
 * How far the next page reaches back, after the set moved up by `moved` positions between two
 * reads. Not less than MIN_OVERLAP when new failures moved it down: how far they move it next
 * depends on how long the page's acks take, and a page that starts too far costs a read again.
 */
function overlapAfter(moved: number): number {
  return Math.max(MIN_OVERLAP, Math.min(MAX_OVERLAP, MIN_OVERLAP + 2 * moved));
}

/** The most pages one look-back reads, pages read again included. */
export const MAX_RECOVERY_READS = 150;

/**
 * The failed jobs that failed at `since` or later, newest first, a page at a time, each once.
 *
 * The set is read by position, and positions move while it is read: a job that leaves it moves
 * every older one up, so a page read at the next offset could start past jobs never read. Every
 * job older than one already read lies after it, so a page is read from a position that still
 * holds a job already read: each page reaches back into the one before (MIN_OVERLAP, and twice as
 * far as the set was last seen to move up), and when none of the jobs read stands in it any more,
 * the pages before are read again (their jobs already read left out). New failures move jobs
 * down: their pages then hold jobs read already, left out too. A job retried since it was listed
 * is left out (it is no longer failed); the first job older than `since` ends the reading, as
 * every one after it is older.
 *
 * Throws when the set moved so much that MAX_RECOVERY_READS pages did not reach its end or `since`.
 */
export async function* recentFailuresOf<J extends FailedJob>(set: FailedSet<J>, since: number): AsyncGenerator<J[]> {
  const seen = new Set<string>();
  let start = 0;
  let overlap = MIN_OVERLAP;
  /** The oldest job read so far, and its position then. */
  let last: { id: string; at: number } | undefined;
  for (let reads = 0; reads < MAX_RECOVERY_READS; reads++) {
    const ids = await set.idsAt(start, start + RECOVERY_PAGE - 1);
    if (start > 0 && !ids.some((id) => seen.has(id))) {
      overlap = Math.min(MAX_OVERLAP, overlap * 2);
      start = Math.max(0, start - MAX_OVERLAP);
      continue;
    }
    // The next page reaches back twice as far as the set moved up since the last read.
    const lastAt = last ? ids.indexOf(last.id) : -1;
    if (last && lastAt >= 0) {
      overlap = overlapAfter(last.at - (start + lastAt));
      last.at = start + lastAt;
    }
    const unseen = ids.filter((id) => !seen.has(id));
    for (const id of unseen) seen.add(id);
    const oldest = unseen[unseen.length - 1];
    if (oldest !== undefined) last = { id: oldest, at: start + ids.lastIndexOf(oldest) };
    const failed = (await set.jobsOf(unseen)).filter((job): job is J & { finishedOn: number } => typeof job?.finishedOn === 'number');
    const recent = failed.filter((job) => job.finishedOn >= since);
    if (recent.length > 0) yield recent;
    if (recent.length < failed.length || ids.length < RECOVERY_PAGE) return;
    start += RECOVERY_PAGE - overlap;
  }
  throw new Error(`the failed set moved too much while it was read (${MAX_RECOVERY_READS} pages read)`);
}
