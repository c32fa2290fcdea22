import type { Rejection } from '../contract/responses';
import { Outcome } from './batch';
import { isItemPrefix, ITEM_PREFIX_LENGTH, parseIndexAfterPrefix } from './itemId';

export type { Rejection };

/** The items of one call that name one group: `prefix` is `<batchId>:<groupId>:` as the client sent it. */
export interface AckTarget {
  batchId: string;
  groupId: string;
  prefix: string;
  indexes: number[];
  /**
   * Its batch is another tenant's, or none at all, as this process read it before the call queued
   * (BatchOwners): unknown_batch without the batch's row being read or locked.
   */
  foreign?: true;
}

/** One ack request, grouped by the group row it touches, plus the IDs rejected as malformed. */
export interface AckCall {
  /** Only this tenant's batches are visible to the call; others' IDs are `unknown_batch`. */
  tenant: string;
  outcome: Outcome;
  /** Why the items failed (only with outcome `failed`); kept as the items' failure reason. */
  error?: string;
  targets: AckTarget[];
  malformed: Rejection[];
}

/** How many item IDs the call carries (every one is counted exactly once in its result). */
export function callSize(call: AckCall): number {
  let n = call.malformed.length;
  for (const target of call.targets) n += target.indexes.length;
  return n;
}

/**
 * Turns the IDs of one request into a call. IDs that share a `batchId:groupId:` prefix share one
 * target: the prefix is checked once, and each ID costs only its index digits.
 */
export function callFromIds(ids: readonly string[], outcome: Outcome, tenant = ''): AckCall {
  const targets = new Map<string, AckTarget | null>();
  const malformed: Rejection[] = [];
  // Consecutive IDs usually name the same group: comparing with the last prefix skips the map lookup.
  // (Comparing a slice with === is ~4× faster in V8 than startsWith on freshly parsed JSON strings.)
  let lastPrefix = '';
  let last: AckTarget | null = null;
  for (const id of ids) {
    const prefix = id.length > ITEM_PREFIX_LENGTH ? id.slice(0, ITEM_PREFIX_LENGTH) : '';
    let target: AckTarget | null;
    if (last !== null && prefix === lastPrefix) {
      target = last;
    } else {
      let found = targets.get(prefix);
      if (found === undefined) {
        found = isItemPrefix(prefix) ? { batchId: prefix.slice(0, 36).toLowerCase(), groupId: prefix.slice(37, 73).toLowerCase(), prefix, indexes: [] } : null;
        targets.set(prefix, found);
      }
      target = found;
      if (found) [lastPrefix, last] = [prefix, found];
    }
    const index = target ? parseIndexAfterPrefix(id) : -1;
    if (target && index >= 0) target.indexes.push(index);
    else malformed.push({ id, reason: 'malformed' });
  }
  return { tenant, outcome, targets: [...targets.values()].filter((t): t is AckTarget => t !== null && t.indexes.length > 0), malformed };
}

/** One entry of the compact form: a group and its indexes, each a number or an inclusive [from, to] range. */
export interface CompactEntry {
  batchId: string;
  groupId: string;
  indexes: Array<number | [number, number]>;
}

/** Items an entry names, without expanding its ranges. */
export function compactSize(entries: readonly CompactEntry[]): number {
  let n = 0;
  for (const entry of entries) for (const i of entry.indexes) n += typeof i === 'number' ? 1 : i[1] - i[0] + 1;
  return n;
}

/** Turns the compact form into a call; entries with ids that are not UUIDs are malformed, item by item. */
export function callFromCompact(entries: readonly CompactEntry[], outcome: Outcome, tenant = ''): AckCall {
  const call: AckCall = { tenant, outcome, targets: [], malformed: [] };
  for (const entry of entries) {
    const prefix = `${entry.batchId}:${entry.groupId}:`;
    const indexes: number[] = [];
    for (const i of entry.indexes) {
      if (typeof i === 'number') indexes.push(i);
      else for (let k = i[0]; k <= i[1]; k++) indexes.push(k);
    }
    if (isItemPrefix(prefix)) {
      call.targets.push({ batchId: entry.batchId.toLowerCase(), groupId: entry.groupId.toLowerCase(), prefix, indexes });
    } else {
      for (const index of indexes) call.malformed.push({ id: `${prefix}${index}`, reason: 'malformed' });
    }
  }
  return call;
}
