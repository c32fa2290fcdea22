/**
 * The words of the HTTP contract (../shared/API.md), declared once as `as const` arrays: the zod
 * schemas (responses.ts, http/schemas.ts), the domain's types, the client and the dashboard all
 * take them from here. No imports, so the client and the browser can use it as it is.
 */
export const BATCH_STATES = ['open', 'sealed', 'complete', 'cancelled'] as const;
export type BatchState = (typeof BATCH_STATES)[number];

/** What an item (and an ack) can be. */
export const OUTCOMES = ['succeeded', 'failed'] as const;
export type Outcome = (typeof OUTCOMES)[number];

/** What a finished batch ended as. */
export const BATCH_OUTCOMES = [...OUTCOMES, 'cancelled'] as const;
export type BatchOutcome = (typeof BATCH_OUTCOMES)[number];

/** An item as GET /v1/items/:itemId shows it. */
export const ITEM_STATES = ['pending', ...OUTCOMES] as const;
export type ItemState = (typeof ITEM_STATES)[number];

/** Why an ID of an ack call was not applied. */
export const REJECT_REASONS = ['malformed', 'unknown_batch', 'unknown_group', 'index_out_of_range', 'batch_cancelled'] as const;
export type RejectReason = (typeof REJECT_REASONS)[number];

/** A callback event's delivery state. */
export const EVENT_STATUSES = ['pending', 'delivered', 'dead'] as const;
export type EventStatus = (typeof EVENT_STATUSES)[number];

/** The most item IDs one ack call takes (more is 413; the client splits larger acks). */
export const MAX_ACK_IDS = 10_000;

/** The longest failure reason an ack call takes, in characters (code points, as zod counts: an emoji is one). */
export const MAX_ERROR_LENGTH = 1000;

/** The fewest and the most items a group row holds: the bounds of a service's GROUP_SIZE (a multiple of 8). */
export const MIN_GROUP_SIZE = 8;
export const MAX_GROUP_SIZE = 65_536;

/**
 * The most groups one add with an Idempotency-Key makes. Its answer lists them (~55 bytes each) and
 * is kept whole for the key's repeats: 100,000 groups are ~5.5 MB, within MySQL's MEDIUMTEXT (16 MB)
 * and MariaDB's default max_allowed_packet (16 MB). Only a GROUP_SIZE under 100 meets it before the
 * API's 10,000,000 items an add.
 */
export const MAX_GROUPS_PER_ADD = 100_000;

/**
 * The header of a `503` for a lock wait that names which of the request's batches were found held
 * (comma-separated ids): a client sends its acks of the others again at once, in a call of their own.
 */
export const HELD_BATCHES_HEADER = 'rollcall-held-batches';
