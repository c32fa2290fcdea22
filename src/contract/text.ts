/**
 * Which strings the API stores: text every backend keeps and compares exactly. No imports, so the
 * client and the integrations use it as the service does.
 *
 * - U+0000: PostgreSQL's text types cannot hold it (the insert fails), where MariaDB and SQLite keep it.
 * - A lone surrogate (half of a UTF-16 pair) has no UTF-8 form: each driver writes a replacement
 *   character instead, so `"a\ud800"` and `"a\udfff"` would be stored, and found, as one string.
 */

/**
 * A lone surrogate, or U+0000. With the `u` flag a well-formed pair is one code point, which the
 * class does not match.
 */
// eslint-disable-next-line no-control-regex -- U+0000 is what this looks for
const NOT_STORABLE_ONE = /[\uD800-\uDFFF\u0000]/u;
// eslint-disable-next-line no-control-regex -- U+0000 is what this looks for
const NOT_STORABLE_ALL = /[\uD800-\uDFFF\u0000]/gu;

/** What the service refuses (`400`) in a stored string, for the error message. */
export const EXACT_TEXT_RULE = 'must be well-formed Unicode without U+0000';

/** Whether every backend stores `text` exactly as given. */
export function isExactText(text: string): boolean {
  return !NOT_STORABLE_ONE.test(text);
}

/**
 * `text` with each lone surrogate and U+0000 replaced by U+FFFD: for text a client reports rather
 * than names by (a failure's message), which the service would otherwise refuse.
 */
export function toExactText(text: string): string {
  return isExactText(text) ? text : text.replace(NOT_STORABLE_ALL, '\uFFFD');
}

const isHighSurrogate = (unit: number) => unit >= 0xd800 && unit <= 0xdbff;
const isLowSurrogate = (unit: number) => unit >= 0xdc00 && unit <= 0xdfff;

/**
 * Where `text`'s first `characters` characters end, in UTF-16 units: a character is a code point,
 * as the contract's limits, zod's and the databases' `VARCHAR(n)` (utf8mb4, PostgreSQL) count, so
 * an emoji is one, not two. A lone surrogate counts as one.
 */
function unitsOfCharacters(text: string, characters: number): number {
  let at = 0;
  for (let counted = 0; counted < characters && at < text.length; counted++) {
    at += isHighSurrogate(text.charCodeAt(at)) && isLowSurrogate(text.charCodeAt(at + 1)) ? 2 : 1;
  }
  return at;
}

/**
 * At most `characters` characters (code points, as the service counts them: zod's string limits
 * do) of `text`, never cutting a surrogate pair in two (a cut pair would leave a lone surrogate,
 * which the service refuses).
 */
export function truncateText(text: string, characters: number): string {
  if (text.length <= characters) return text; // no more code points than UTF-16 units
  const end = unitsOfCharacters(text, characters);
  return end === text.length ? text : text.slice(0, end);
}

/**
 * `n` with commas between thousands (10,000), for messages. Not `toLocaleString('en-US')`: its
 * first call loads ICU's locale data, ~7 MiB of resident memory for the process's life (docs/benchmarks.md).
 */
export function withThousands(n: number): string {
  return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}
