/** An item ID split into its parts: `<batchId>:<groupId>:<index>`. */
export interface ItemRef {
  batchId: string;
  groupId: string;
  index: number;
}

export const UUID_LENGTH = 36;
/** `<batchId>:<groupId>:` */
export const ITEM_PREFIX_LENGTH = 2 * UUID_LENGTH + 2;
/** Longer indexes cannot be in range of any group and only cost parsing time. */
const MAX_INDEX_DIGITS = 15;

/** True for a canonical 8-4-4-4-12 hex UUID at `start` (either case). No regex: this runs per item. */
export function isUuidAt(text: string, start: number): boolean {
  if (text.length < start + UUID_LENGTH) return false;
  for (let i = 0; i < UUID_LENGTH; i++) {
    const c = text.charCodeAt(start + i);
    if (i === 8 || i === 13 || i === 18 || i === 23) {
      if (c !== 45 /* - */) return false;
    } else if (!((c >= 48 && c <= 57) || (c >= 97 && c <= 102) || (c >= 65 && c <= 70))) {
      return false;
    }
  }
  return true;
}

export function isUuid(text: string): boolean {
  return text.length === UUID_LENGTH && isUuidAt(text, 0);
}

/** True when `prefix` is exactly `<uuid>:<uuid>:`. */
export function isItemPrefix(prefix: string): boolean {
  return (
    prefix.length === ITEM_PREFIX_LENGTH &&
    prefix.charCodeAt(UUID_LENGTH) === 58 &&
    prefix.charCodeAt(ITEM_PREFIX_LENGTH - 1) === 58 &&
    isUuidAt(prefix, 0) &&
    isUuidAt(prefix, UUID_LENGTH + 1)
  );
}

/**
 * The index after the prefix: decimal digits only, no sign, no leading zero (so `prefix + index`
 * rebuilds the ID exactly as sent). Returns -1 when malformed.
 */
export function parseIndexAfterPrefix(id: string): number {
  const length = id.length - ITEM_PREFIX_LENGTH;
  if (length < 1 || length > MAX_INDEX_DIGITS) return -1;
  if (length > 1 && id.charCodeAt(ITEM_PREFIX_LENGTH) === 48) return -1;
  let index = 0;
  for (let i = ITEM_PREFIX_LENGTH; i < id.length; i++) {
    const digit = id.charCodeAt(i) - 48;
    if (digit < 0 || digit > 9) return -1;
    index = index * 10 + digit;
  }
  return index;
}

/** Parses one item ID; null when it is not of the form (reported as `malformed`). UUIDs come back lower case. */
export function parseItemId(id: string): ItemRef | null {
  if (!isItemPrefix(id.slice(0, ITEM_PREFIX_LENGTH))) return null;
  const index = parseIndexAfterPrefix(id);
  if (index < 0) return null;
  return { batchId: id.slice(0, UUID_LENGTH).toLowerCase(), groupId: id.slice(UUID_LENGTH + 1, ITEM_PREFIX_LENGTH - 1).toLowerCase(), index };
}

export function formatItemId(ref: ItemRef): string {
  return `${ref.batchId}:${ref.groupId}:${ref.index}`;
}
