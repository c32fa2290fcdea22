/**
 * The rollcall dashboard: lists batches with progress, filters and pages them with the cursor API,
 * opens one batch with its counts, timeline, metadata, failure reasons, parent and children, and
 * callback deliveries, and refreshes every second. A token with the produce scope may cancel a
 * batch (after a confirm). Talks only to this service's own API; a token, when needed, lives in
 * sessionStorage.
 */

// The API shapes come from the contract (type-only imports: nothing of them reaches the browser).
import type { BatchPage, BatchView as Batch, EventsView, FailurePage } from '../src/contract/responses';

type EventView = EventsView['events'][number];

const TOKEN_KEY = 'rollcall.token';
const REFRESH_MS = 1000;
/** A refresh out this long no longer holds the next back (a read the network lost). */
const STALLED_MS = 5000;
/** A read not answered in this time is given up (fetch itself waits as long as the connection lives). */
const READ_TIMEOUT_MS = 30_000;

const $ = <T extends HTMLElement>(id: string): T => {
  const el = document.getElementById(id);
  if (!el) throw new Error(`#${id} missing`);
  return el as T;
};

class Unauthorized extends Error {}
/** An answer to a read made with a token given up since (another signed in): nothing of it is used. */
class Superseded extends Error {}
/** Any other refusal, with its error code (`batch_not_found`: the batch is gone). */
class Refused extends Error {
  constructor(
    message: string,
    readonly code: string | undefined,
  ) {
    super(message);
  }
}

/**
 * No refresh before this time (epoch ms): a 429's Retry-After. The page asked again every second,
 * and refused requests count against the tenant's limit too, so an open tab kept its producers and
 * consumers refused.
 */
let quietUntil = 0;

async function api<T>(path: string, method = 'GET'): Promise<T> {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const res = await fetch(path, {
    method,
    headers: token ? { authorization: `Bearer ${token}` } : {},
    ...(method === 'GET' ? { signal: AbortSignal.timeout(READ_TIMEOUT_MS) } : {}),
  });
  const body = (await res.json().catch(() => null)) as (T & { error?: { code?: string; message: string } }) | null;
  // A read's answer, body and all, for a token given up meanwhile is not used. A write's is: it was done.
  if (method === 'GET' && sessionStorage.getItem(TOKEN_KEY) !== token) throw new Superseded('the token changed meanwhile');
  if (res.status === 429) quietUntil = Date.now() + 1000 * (Number(res.headers.get('retry-after')) || 1);
  // A refused write (a scope taken away since, a proxy's Host the cross-site check refuses) says why; a refused read signs out.
  if (method === 'GET' && (res.status === 401 || res.status === 403))
    throw new Unauthorized(res.status === 403 ? 'this token lacks the read scope' : 'a token is needed');
  if (!res.ok || !body) throw new Refused(body?.error?.message ?? `HTTP ${res.status}`, body?.error?.code);
  return body;
}

/**
 * Whether `el` already shows what `data` would draw: then it is left as it is. Redrawn every second
 * though nothing changed, a text being selected (a batch id to copy) was lost, and a click on a row
 * replaced between its press and its release did nothing.
 */
function unchanged(el: HTMLElement, data: unknown): boolean {
  const drawn = JSON.stringify(data);
  if (el.dataset.drawn === drawn) return true;
  el.dataset.drawn = drawn;
  return false;
}

const when = (iso: string | null) => (iso ? new Date(iso).toLocaleString() : '—');
const pct = (n: number, total: number) => (total === 0 ? 0 : (100 * n) / total);
const count = (n: number) => n.toLocaleString();

function text(tag: string, content: string, className?: string): HTMLElement {
  const el = document.createElement(tag);
  el.textContent = content;
  if (className) el.className = className;
  return el;
}

function progressBar(batch: Batch, big = false): HTMLElement {
  const bar = document.createElement('div');
  bar.className = big ? 'bar big' : 'bar';
  bar.setAttribute('role', 'progressbar');
  bar.setAttribute('aria-valuenow', String(batch.succeeded + batch.failed));
  bar.setAttribute('aria-valuemax', String(batch.total));
  bar.title = `${count(batch.succeeded)} succeeded, ${count(batch.failed)} failed, ${count(batch.pending)} pending of ${count(batch.total)}`;
  for (const kind of ['succeeded', 'failed'] as const) {
    const part = document.createElement('div');
    part.className = kind;
    part.style.width = `${pct(batch[kind], batch.total)}%`;
    bar.append(part);
  }
  return bar;
}

function stateBadge(batch: Batch): HTMLElement {
  return text('span', batch.outcome ? `${batch.state} · ${batch.outcome}` : batch.state, `state ${batch.state} ${batch.outcome ?? ''}`);
}

/** A batch id as a link that opens that batch. */
function batchLink(id: string, label = `…${id.slice(-8)}`): HTMLElement {
  const link = text('a', label, 'id batch-link');
  (link as HTMLAnchorElement).href = `#${id}`;
  link.title = id;
  link.dataset.id = id;
  link.addEventListener('click', (e) => {
    e.preventDefault();
    void openDetail(id);
  });
  return link;
}

/** The scopes of the token in use (null until known): the cancel button needs produce. */
let scopes: string[] | null = null;

async function knowScopes(): Promise<string[]> {
  scopes ??= (await api<{ scopes: string[] }>('/v1/whoami')).scopes;
  return scopes;
}

/** What the list shows: filters, and the cursors of the pages visited (for "Previous"). */
const view = { state: '', userKey: '', cursors: [null] as Array<string | null>, nextCursor: null as string | null, openBatch: null as string | null };

/**
 * The order of one view's reads: the once-a-second refresh and a click may both be out, and the
 * older answer, if it came last, would show what the user left (the page before "Next", a batch as
 * it was before "Cancel"). An answer older than the one shown is dropped; only those: on a link
 * slower than the refresh every answer has a later read out, and each is still shown.
 */
function readOrder(): { start(): number; mayShow(read: number): boolean; dropStarted(): void } {
  let started = 0;
  let shown = 0;
  return {
    start: () => ++started,
    mayShow(read) {
      if (read < shown) return false;
      shown = read;
      return true;
    },
    /** Every read out now is dropped when it answers (a token given up). */
    dropStarted: () => void (shown = started + 1),
  };
}

const listReads = readOrder();
const detailReads = readOrder();

async function renderList(): Promise<void> {
  const params = new URLSearchParams({ limit: '20' });
  if (view.state) params.set('state', view.state);
  if (view.userKey) params.set('userKey', view.userKey);
  const cursor = view.cursors[view.cursors.length - 1];
  if (cursor) params.set('cursor', cursor);
  const read = listReads.start();
  const page = await api<BatchPage>(`/v1/batches?${params}`);
  if (!listReads.mayShow(read)) return;
  view.nextCursor = page.nextCursor;
  showPager(page);
  const body = $('batches').querySelector('tbody') as HTMLTableSectionElement;
  if (unchanged(body, page.batches)) return;
  body.replaceChildren(
    ...page.batches.map((b) => {
      const row = document.createElement('tr');
      row.className = 'batch';
      row.dataset.id = b.id;
      // UUIDv7s begin with their timestamp, so batches made together share a prefix: show the random tail.
      const id = text('td', `…${b.id.slice(-8)}`, 'id');
      id.title = b.id;
      const state = document.createElement('td');
      state.append(stateBadge(b));
      const progress = document.createElement('td');
      progress.append(progressBar(b));
      row.append(
        id,
        state,
        text('td', b.userKey ?? '—'),
        progress,
        text('td', `${count(b.succeeded + b.failed)} / ${count(b.total)}`),
        text('td', when(b.createdAt)),
        text('td', when(b.completedAt ?? b.cancelledAt)),
      );
      row.addEventListener('click', () => void openDetail(b.id));
      return row;
    }),
  );
  $('empty').hidden = page.batches.length > 0;
}

/** The pager's buttons as the page shown allows (null: a page is being read, and none may be pressed). */
function showPager(page: BatchPage | null): void {
  ($('next') as HTMLButtonElement).disabled = !page?.nextCursor;
  ($('prev') as HTMLButtonElement).disabled = !page || view.cursors.length <= 1;
  ($('first') as HTMLButtonElement).disabled = !page || view.cursors.length <= 1;
}

/**
 * Goes to another page of the list. Until its answer the pager is off: a second "Next" (a double
 * click) pushed the same cursor again, and a "Next" right after "Previous" used the page before's.
 */
function turnPage(cursors: Array<string | null>): void {
  notice = '';
  // A read of the page left, out now, must not be shown when it answers: it would turn the pager
  // back on with that page's cursor before this page is shown.
  listReads.dropStarted();
  view.cursors = cursors;
  view.nextCursor = null;
  showPager(null);
  void refresh();
}

function renderFamily(batch: Batch, children: BatchPage): void {
  const parent = $('parent');
  parent.replaceChildren(
    ...(batch.parentItem
      ? [text('span', 'Stands for item '), text('code', batch.parentItem), text('span', ' of parent '), batchLink(batch.parentItem.slice(0, 36))]
      : []),
  );
  parent.hidden = !batch.parentItem;
  const list = $('children');
  list.replaceChildren(
    ...children.batches.map((child) => {
      const item = document.createElement('li');
      item.append(batchLink(child.id), text('span', ' '), stateBadge(child), text('span', ` ${count(child.succeeded + child.failed)} / ${count(child.total)}`));
      return item;
    }),
  );
  $('no-children').hidden = children.batches.length > 0;
  // The list is newest first: the oldest children, often the ones stuck, are those left out.
  $('children-note').textContent = children.nextCursor ? `showing the newest ${children.batches.length} child batches` : '';
}

function renderFailures(page: FailurePage): void {
  const rows = page.failures.map((f) => {
    const row = document.createElement('tr');
    row.append(text('td', f.id, 'id'), text('td', f.error), text('td', when(f.failedAt)));
    return row;
  });
  ($('failures').querySelector('tbody') as HTMLTableSectionElement).replaceChildren(...rows);
  $('no-failures').hidden = page.failures.length > 0;
  const notes: string[] = [];
  if (page.nextCursor) notes.push(`showing the oldest ${page.failures.length} reasons`);
  if (page.dropped > 0) notes.push(`${count(page.dropped)} more failures whose reason was not kept (the per-batch limit)`);
  $('failures-note').textContent = notes.join('; ');
}

async function renderDetail(id: string): Promise<void> {
  const read = detailReads.start();
  const [batch, { events }, failures, children, mine] = await Promise.all([
    api<Batch>(`/v1/batches/${id}`),
    api<{ events: EventView[] }>(`/v1/batches/${id}/events`),
    api<FailurePage>(`/v1/batches/${id}/failures?limit=100`),
    api<BatchPage>(`/v1/batches?parent=${id}&limit=100`),
    knowScopes(),
  ]);
  // Another batch opened meanwhile, or a later read shown. In this order: an answer for a batch no
  // longer open must not count as shown, or it would drop the open batch's older answers.
  if (view.openBatch !== id || !detailReads.mayShow(read)) return;
  if (unchanged($('detail'), [batch, events, failures, children, mine])) return;
  renderFamily(batch, children);
  renderFailures(failures);
  const cancel = $('cancel') as HTMLButtonElement;
  cancel.hidden = !(mine.includes('produce') || mine.includes('admin')) || batch.state === 'complete' || batch.state === 'cancelled';
  $('detail-title').replaceChildren(text('span', `Batch ${batch.id} `, 'id'), stateBadge(batch));
  $('detail-bar').replaceWith(Object.assign(progressBar(batch, true), { id: 'detail-bar' }));
  const counts: Array<[string, number]> = [
    ['total', batch.total],
    ['succeeded', batch.succeeded],
    ['failed', batch.failed],
    ['pending', batch.pending],
  ];
  $('detail-counts').replaceChildren(...counts.flatMap(([k, v]) => [text('dt', k), text('dd', count(v))]));
  const steps: Array<[string, string | null]> = [
    ['created', batch.createdAt],
    ['sealed', batch.sealedAt],
    batch.cancelledAt ? ['cancelled', batch.cancelledAt] : ['completed', batch.completedAt],
    ['last activity', batch.updatedAt],
  ];
  $('timeline').replaceChildren(...steps.map(([k, v]) => text('li', `${k}: ${when(v)}`)));
  $('metadata').textContent = JSON.stringify({ userKey: batch.userKey, callbackUrl: batch.callbackUrl, metadata: batch.metadata }, null, 2);
  const rows = events.map((e) => {
    const row = document.createElement('tr');
    row.append(text('td', e.event), text('td', e.status), text('td', String(e.attempts)), text('td', when(e.nextAttemptAt)), text('td', e.lastError ?? '—'));
    return row;
  });
  ($('events').querySelector('tbody') as HTMLTableSectionElement).replaceChildren(...rows);
  $('no-events').hidden = events.length > 0;
  delete $('detail').dataset.loading;
}

async function openDetail(id: string): Promise<void> {
  if (view.openBatch !== id) {
    // Until this batch's first answer the panel holds another batch's figures and its Cancel
    // button: they are hidden (style.css), so nothing of that batch is read, or cancelled, as this one.
    $('detail-title').replaceChildren(text('span', `Batch ${id} `, 'id'));
    $('detail').dataset.loading = '';
    delete $('detail').dataset.drawn; // drawn for it before, it must be drawn again, loading cleared
  }
  view.openBatch = id;
  notice = '';
  // The batch's address: a link opened in another tab, a bookmark or a reload shows it again.
  if (location.hash !== `#${id}`) history.pushState(null, '', `#${id}`);
  $('list').hidden = true;
  $('detail').hidden = false;
  await refresh();
}

/** Empties the batch panel: nothing of a batch stays in the page, hidden or not, for the next token. */
function clearDetail(): void {
  for (const id of ['detail-title', 'detail-bar', 'detail-counts', 'timeline', 'children', 'parent']) $(id).replaceChildren();
  $('detail-bar').removeAttribute('title');
  for (const id of ['metadata', 'failures-note', 'children-note']) $(id).textContent = '';
  for (const id of ['failures', 'events']) ($(id).querySelector('tbody') as HTMLTableSectionElement).replaceChildren();
}

/**
 * The address without a batch in it: a new history entry, or (`replace`) in place of the batch's,
 * when the batch is gone: Back to it, closed at once by a new entry, led back to where it came
 * from, over and over.
 */
function clearAddress(replace = false): void {
  if (!location.hash) return;
  if (replace) history.replaceState(null, '', location.pathname + location.search);
  else history.pushState(null, '', location.pathname + location.search);
}

function closeDetail(replace = false): void {
  view.openBatch = null;
  delete $('detail').dataset.drawn;
  clearAddress(replace);
  $('detail').hidden = true;
  $('list').hidden = false;
}

/** The batch the address names (`#<id>`), if any. */
function batchInAddress(): string | null {
  let id: string;
  try {
    id = decodeURIComponent(location.hash.slice(1));
  } catch {
    return null; // a malformed escape (`#%`) names no batch
  }
  return /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(id) ? id : null;
}

function followAddress(): void {
  const id = batchInAddress();
  if (id) void openDetail(id);
  else if (view.openBatch) {
    closeDetail();
    void refresh();
  }
}

function showLogin(message: string): void {
  $('login').hidden = false;
  $('list').hidden = true;
  $('detail').hidden = true;
  $('login-error').textContent = message;
}

/**
 * Refreshes under way, and when the last began: the timer starts none while one is out (a slow
 * service got a pile of them), unless it has been out STALLED_MS.
 */
const refreshes = { out: 0, lastStarted: 0 };
/** Said in place of an error until the user goes elsewhere (a batch that is gone). */
let notice = '';

async function refresh(): Promise<void> {
  refreshes.out += 1;
  refreshes.lastStarted = Date.now();
  const open = view.openBatch;
  try {
    if (open) await renderDetail(open);
    else await renderList();
    $('error').textContent = notice;
    $('live').style.opacity = '1';
    $('sign-out').hidden = !sessionStorage.getItem(TOKEN_KEY);
  } catch (error) {
    if (error instanceof Superseded) return;
    if (error instanceof Unauthorized) return signedOut(error.message);
    if (error instanceof Refused && error.code === 'batch_not_found' && open && view.openBatch === open) {
      // Deleted, or removed by the sweeper: its panel (and Cancel button) would stay, asked for every second.
      closeDetail(true);
      notice = `Batch ${open} is gone: deleted, or removed once its retention ended`;
      void refresh();
      return;
    }
    $('error').textContent = `Could not refresh: ${(error as Error).message}`;
    $('live').style.opacity = '.3';
  } finally {
    refreshes.out -= 1;
  }
}

/**
 * A token given (a first, or another after a 401): nothing read with the one before stays on the
 * screen (its filters included), nor is used when its reads answer (Superseded: not a 401 either,
 * which would show the sign-in again, nor its scopes). Another tenant's token, on a shared screen, went on
 * showing the last tenant's list, and with a batch open, its list for good (the batch unknown to
 * the new tenant, every refresh failed).
 */
function forgetShown(): void {
  scopes = null;
  notice = '';
  // Outside the panels hidden below: a refused cancel's message stayed on the sign-in screen.
  $('error').textContent = '';
  $('live').style.opacity = '1';
  quietUntil = 0;
  $('sign-out').hidden = true;
  clearDetail();
  view.openBatch = null;
  view.cursors = [null];
  view.nextCursor = null;
  view.state = '';
  view.userKey = '';
  ($('state') as HTMLSelectElement).value = '';
  ($('user-key') as HTMLInputElement).value = '';
  listReads.dropStarted();
  detailReads.dropStarted();
  const rows = $('batches').querySelector('tbody') as HTMLTableSectionElement;
  rows.replaceChildren();
  delete rows.dataset.drawn;
  delete $('detail').dataset.drawn;
  $('detail').hidden = true;
}

/**
 * Back to the sign-in, the token dropped and nothing it read left on the page: on Sign out, and when
 * a read is refused (401, 403). Kept after a refusal, a token that may produce but not read stayed
 * in the tab, the Sign out button hidden. `message` says why, if a token had been given.
 */
function signedOut(message: string): void {
  const hadToken = sessionStorage.getItem(TOKEN_KEY) !== null;
  sessionStorage.removeItem(TOKEN_KEY);
  forgetShown();
  // A batch in the address was that token's: the next sign-in, a first one now, must not follow it.
  if (hadToken) clearAddress(true);
  showLogin(hadToken ? message : '');
}

function wire(): void {
  $('filters').addEventListener('submit', (e) => {
    e.preventDefault();
    view.state = ($('state') as HTMLSelectElement).value;
    // Not trimmed: a userKey matches exactly (" nightly" is not "nightly").
    view.userKey = ($('user-key') as HTMLInputElement).value;
    turnPage([null]);
  });
  $('next').addEventListener('click', () => {
    if (view.nextCursor) turnPage([...view.cursors, view.nextCursor]);
  });
  $('prev').addEventListener('click', () => turnPage(view.cursors.slice(0, Math.max(1, view.cursors.length - 1))));
  $('first').addEventListener('click', () => turnPage([null]));
  $('cancel').addEventListener('click', () => {
    const id = view.openBatch;
    if (!id || !window.confirm(`Cancel batch ${id}? Workers' acks of its items will be refused. This cannot be undone.`)) return;
    api<Batch>(`/v1/batches/${id}/cancel`, 'POST')
      .then(() => refresh())
      .catch((error: Error) => {
        scopes = null; // a scope taken away since: the next refresh asks again, and hides the button
        $('error').textContent = `Could not cancel: ${error.message}`;
      });
  });
  $('close').addEventListener('click', () => {
    closeDetail();
    void refresh();
  });
  $('login-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const field = $('token') as HTMLInputElement;
    // A batch in the address is followed after a first sign-in (a link opened in a new tab), not
    // after a token was refused: it was the last token's (another tenant's, maybe) batch.
    const first = !sessionStorage.getItem(TOKEN_KEY);
    sessionStorage.setItem(TOKEN_KEY, field.value.trim());
    field.value = ''; // not left in the page for the next one at a shared screen
    forgetShown();
    if (!first) clearAddress();
    $('login').hidden = true;
    $('list').hidden = false;
    if (batchInAddress()) followAddress();
    else void refresh();
  });
  $('sign-out').addEventListener('click', () => signedOut(''));
  window.addEventListener('popstate', followAddress);
}

wire();
if (batchInAddress()) followAddress();
else void refresh();
setInterval(() => {
  const idle = refreshes.out === 0 || Date.now() - refreshes.lastStarted >= STALLED_MS;
  if ($('login').hidden && idle && Date.now() >= quietUntil) void refresh();
}, REFRESH_MS);
