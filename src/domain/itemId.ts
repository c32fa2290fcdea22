/** An item ID split into its parts: `<batchId>:<groupId>:<index>`. */
export interface ItemRef {
  batchId: string;
  groupId: string;
  index: number;
}

const UUID_LENGTH = 36;
const GROUP_START = UUID_LENGTH + 1;
const INDEX_START = GROUP_START + UUID_LENGTH + 1;
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

/** Parses an item ID; returns null when it is not of the form (the caller reports it as `malformed`). */
export function parseItemId(id: string): ItemRef | null {
  const length = id.length;
  if (length <= INDEX_START || length > INDEX_START + MAX_INDEX_DIGITS) return null;
  if (id.charCodeAt(UUID_LENGTH) !== 58 /* : */ || id.charCodeAt(GROUP_START + UUID_LENGTH) !== 58) return null;
  if (!isUuidAt(id, 0) || !isUuidAt(id, GROUP_START)) return null;
  let index = 0;
  for (let i = INDEX_START; i < length; i++) {
    const digit = id.charCodeAt(i) - 48;
    if (digit < 0 || digit > 9) return null;
    index = index * 10 + digit;
  }
  return {
    batchId: id.slice(0, UUID_LENGTH).toLowerCase(),
    groupId: id.slice(GROUP_START, GROUP_START + UUID_LENGTH).toLowerCase(),
    index,
  };
}

export function formatItemId(ref: ItemRef): string {
  return `${ref.batchId}:${ref.groupId}:${ref.index}`;
}
