/// <reference lib="dom" />
// Functions passed to page.evaluate / waitForFunction run in the browser, hence the DOM types.
import fs from 'node:fs';
import path from 'node:path';

import { Browser, chromium, Page } from 'playwright-core';

import { backends } from '../helpers/backends';
import { BatchSetup, batchWith } from '../helpers/batches';
import { startService, TestService } from '../helpers/service';

const CHROMIUM = '/usr/bin/chromium';
// CI installs Chromium (.ci/run); without it the browser tests cannot run and say so.
const haveChromium = fs.existsSync(CHROMIUM);
if (!haveChromium) {
  if (process.env.CI) throw new Error(`${CHROMIUM} is missing: .ci/run installs it (apt-get install chromium)`);
  console.warn(`dashboard browser tests skipped: ${CHROMIUM} is not installed (apt-get install chromium)`);
}
const describeWithBrowser = haveChromium ? describe : describe.skip;
// SQLite, and PostgreSQL when TEST_PG_URL is set (MariaDB's suite covers the same store code).
const dashboardBackends = backends().filter(([name]) => name !== 'mysql');

async function launch(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-sync'],
  });
}

/**
 * Holds the answers to the page's next `count` reads that `matches` picks until `release()`. Each is
 * fetched from the service when the page sends it, so it holds what was true then: a late answer to
 * an early read, as a slow network gives. `delivered` settles once the held answers reached the page.
 */
async function holdAnswers(page: Page, matches: (url: URL) => boolean, count = 1) {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let firstHeld!: () => void;
  const held = new Promise<void>((resolve) => (firstHeld = resolve));
  const fulfilled: Array<Promise<void>> = [];
  let holding = 0;
  await page.route(matches, async (route) => {
    if (route.request().method() !== 'GET' || holding >= count) return route.continue();
    holding += 1;
    const answer = route.fetch().then(async (response) => {
      firstHeld();
      await released;
      await route.fulfill({ response });
    });
    fulfilled.push(answer);
    await answer;
  });
  return { held, release, delivered: async () => void (await Promise.all(fulfilled)) };
}

/** From now on, notes each content of `selector` (its text and its children) the page shows; `shown()` lists them. */
async function noteShown(page: Page, selector: string): Promise<{ shown(): Promise<Array<{ text: string; children: number }>> }> {
  await page.evaluate((sel) => {
    const notes = ((window as unknown as { shown?: Record<string, unknown[]> }).shown ??= {});
    const target = document.querySelector(sel) as Element;
    const seen: unknown[] = (notes[sel] = []);
    new MutationObserver(() => seen.push({ text: target.textContent ?? '', children: target.childElementCount })).observe(target, {
      childList: true,
      subtree: true,
      characterData: true,
    });
  }, selector);
  return {
    shown: () => page.evaluate((sel) => (window as unknown as { shown: Record<string, Array<{ text: string; children: number }>> }).shown[sel] ?? [], selector),
  };
}

describeWithBrowser.each(dashboardBackends)('the dashboard in a real browser (%s)', (name, backend) => {
  jest.setTimeout(120_000);
  let browser: Browser;
  beforeAll(async () => {
    browser = await launch();
  });
  afterAll(async () => {
    await browser?.close();
  });

  async function withService(env: Record<string, string>, run: (svc: TestService, url: string, page: Page) => Promise<void>) {
    const svc = await startService(backend, env);
    svc.clock.now = Date.now();
    const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
    const external: string[] = [];
    page.on('request', (r) => {
      if (!r.url().startsWith(svc.url)) external.push(r.url());
    });
    try {
      await run(svc, svc.url, page);
      expect(external).toEqual([]); // nothing is loaded from other hosts
    } finally {
      // A held route whose answer is still being fetched (the page polls on) must not fail the test as the page closes.
      await page.unrouteAll({ behavior: 'ignoreErrors' });
      await page.close();
      await svc.stop();
    }
  }

  /** A batch of `count` items whose first `ack` items succeeded and the next `fail` failed. */
  async function batch(svc: TestService, setup: BatchSetup, count: number, ack: number, fail = 0) {
    const made = await batchWith(svc.client, count, setup);
    if (ack) await svc.client.ack(made.ids.slice(0, ack));
    if (fail) await svc.client.ack(made.ids.slice(ack, ack + fail), { outcome: 'failed' });
    return made;
  }

  it('when batches exist, then the page lists them with live progress, filters, pages and opens one', async () => {
    await withService({}, async (svc, url, page) => {
      await batch(svc, { userKey: 'nightly-export', metadata: { owner: 'data' } }, 5000, 5000);
      await batch(svc, { userKey: 'thumbnails' }, 1200, 700, 120);
      await batch(svc, { userKey: 'emails', callbackUrl: 'http://127.0.0.1:9/hook' }, 300, 300);
      await batch(svc, { userKey: 'reindex', sealed: false }, 20_000, 2500);
      const moving = await batch(svc, { userKey: 'catalog-42' }, 1000, 100);

      await page.goto(url);
      await page.waitForSelector('tr.batch');
      expect(await page.locator('tr.batch').count()).toBe(5);
      const row = page.locator(`tr.batch[data-id="${moving.id}"]`);
      await expect(row.textContent()).resolves.toContain('catalog-42');
      await expect(row.textContent()).resolves.toContain('sealed');
      const done = async () => Number(await row.locator('[role=progressbar]').getAttribute('aria-valuenow'));
      expect(await done()).toBe(100);

      await svc.api.post('/v1/acks').send({ ids: moving.ids.slice(100, 600) });
      await page.waitForFunction((id) => document.querySelector(`tr[data-id="${id}"] [role=progressbar]`)?.getAttribute('aria-valuenow') === '600', moving.id, {
        timeout: 10_000,
      });
      const width = await row.locator('.bar .succeeded').evaluate((el) => (el as HTMLElement).style.width);
      expect(width).toBe('60%');
      if (name === 'sqlite') fs.mkdirSync(path.resolve(__dirname, '../../docs/img'), { recursive: true });
      // One screenshot for the README, from the SQLite run.
      if (name === 'sqlite') await page.screenshot({ path: path.resolve(__dirname, '../../docs/img/dashboard.png'), fullPage: true });

      await page.selectOption('#state', 'complete');
      await page.click('#filters button');
      await page.waitForFunction(() => document.querySelectorAll('tr.batch').length === 2);
      const states = await page.locator('tr.batch .state').allTextContents();
      expect(states.every((s) => s.startsWith('complete'))).toBe(true);

      await page.selectOption('#state', '');
      await page.click('#filters button');
      await page.waitForFunction(() => document.querySelectorAll('tr.batch').length === 5);
      for (let i = 0; i < 21; i++) expect((await svc.api.post('/v1/batches').send({ userKey: `page-${i}` })).status).toBe(201);
      // Page 1 as read after the last create: a refresh during the creates also shows 20 rows, and
      // "Next" then goes on from its 20th row, leaving fewer than 6 (CI, where creates are slow).
      await page.waitForFunction(
        () => document.querySelectorAll('tr.batch').length === 20 && document.querySelector('tr.batch td:nth-child(3)')?.textContent === 'page-20',
      );
      await page.click('#next');
      await page.waitForFunction(() => document.querySelectorAll('tr.batch').length === 6);
      await page.click('#prev');
      await page.waitForFunction(() => document.querySelectorAll('tr.batch').length === 20);

      await page.fill('#user-key', 'emails');
      await page.click('#filters button');
      await page.waitForFunction(() => document.querySelectorAll('tr.batch').length === 1);
      await page.click('tr.batch');
      await page.waitForSelector('#detail:not([hidden])');
      await page.waitForFunction(() => (document.querySelector('#detail-counts')?.textContent ?? '').includes('300'));
      expect(await page.locator('#timeline').textContent()).toContain('completed:');
      expect(await page.locator('#events tbody').textContent()).toContain('batch.completed');
      expect(await page.locator('#metadata').textContent()).toContain('127.0.0.1:9/hook');
    });
  });

  it("when the once-a-second refresh of page 1 answers after a click's page 2, then page 2 stays shown", async () => {
    await withService({}, async (svc, url, page) => {
      for (let i = 0; i < 26; i++) expect((await svc.api.post('/v1/batches').send({ userKey: `late-${i}` })).status).toBe(201);
      await page.goto(url);
      await page.waitForFunction(() => document.querySelectorAll('tr.batch').length === 20);
      // The answer to the next read of page 1 (the refresh's) is held until page 2 has been shown.
      const pageOne = (u: URL) => u.pathname === '/v1/batches' && !u.searchParams.has('cursor');
      const late = await holdAnswers(page, pageOne);
      await late.held;
      await page.click('#next');
      await page.waitForFunction(() => document.querySelectorAll('tr.batch').length === 6);
      const rows = await noteShown(page, '#batches tbody');
      late.release();
      await late.delivered();
      await page.waitForResponse((response) => response.url().includes('/v1/batches?')); // a later refresh, after the held answer
      await page.waitForFunction(() => document.querySelectorAll('tr.batch').length === 6);
      expect((await rows.shown()).map((content) => content.children)).not.toContain(20);
    });
  });

  it('when the service needs tokens, then the page asks for one, keeps it for the tab, shows batches', async () => {
    const tokens = JSON.stringify([
      { token: 'dashboard-reader-123456', tenant: 't1', scopes: ['read'] },
      { token: 'producer-token-1234567', tenant: 't1', scopes: ['produce', 'consume'] },
    ]);
    await withService({ API_TOKENS: tokens }, async (svc, url, page) => {
      await svc.api.post('/v1/batches').set('Authorization', 'Bearer producer-token-1234567').send({ userKey: 'secured' });
      await page.goto(url);
      await page.waitForSelector('#login:not([hidden])');
      await page.fill('#token', 'wrong-token-00000000000');
      await page.click('#login-form button');
      await page.waitForFunction(() => (document.querySelector('#login-error')?.textContent ?? '').length > 0);
      await page.fill('#token', 'dashboard-reader-123456');
      await page.click('#login-form button');
      await page.waitForSelector('tr.batch');
      expect(await page.locator('tr.batch').textContent()).toContain('secured');
      expect(await page.evaluate(() => sessionStorage.getItem('rollcall.token'))).toBe('dashboard-reader-123456');
      expect(await page.evaluate(() => localStorage.length)).toBe(0);
    });
  });

  it("when another tenant's token is given after a 401, with a batch open, then nothing of the first tenant's stays on the screen", async () => {
    const tokens = JSON.stringify([
      { token: 'reader-of-tenant-one-1', tenant: 't1', scopes: ['read'] },
      { token: 'reader-of-tenant-two-2', tenant: 't2', scopes: ['read'] },
      { token: 'producer-of-tenant-one', tenant: 't1', scopes: ['produce'] },
      { token: 'producer-of-tenant-two', tenant: 't2', scopes: ['produce'] },
    ]);
    await withService({ API_TOKENS: tokens }, async (svc, url, page) => {
      const one = await svc.api.post('/v1/batches').set('Authorization', 'Bearer producer-of-tenant-one').send({ userKey: 'tenant-one-batch' });
      await svc.api.post('/v1/batches').set('Authorization', 'Bearer producer-of-tenant-two').send({ userKey: 'tenant-two-batch' });
      await page.goto(url);
      await page.waitForSelector('#login:not([hidden])');
      await page.fill('#token', 'reader-of-tenant-one-1');
      await page.click('#login-form button');
      await page.fill('#user-key', 'tenant-one-batch');
      await page.click('#filters button');
      await page.click(`tr.batch[data-id="${one.body.id}"]`);
      await page.waitForFunction((id) => (document.querySelector('#detail-title')?.textContent ?? '').includes(id), one.body.id);
      // The token is revoked (here: replaced by one the service does not know): the next refresh is a 401.
      await page.evaluate(() => sessionStorage.setItem('rollcall.token', 'revoked-token-00000000'));
      await page.waitForSelector('#login:not([hidden])');
      await page.fill('#token', 'reader-of-tenant-two-2');
      await page.click('#login-form button');
      expect(await page.locator('#batches tbody').textContent()).not.toContain('tenant-one-batch');
      expect(await page.locator('#user-key').inputValue()).toBe('');
      await page.waitForFunction(() => (document.querySelector('#batches tbody')?.textContent ?? '').includes('tenant-two-batch'), undefined, {
        timeout: 5_000,
      });
      expect(await page.locator('#batches tbody').textContent()).not.toContain('tenant-one-batch');
      expect(await page.locator('#detail').isHidden()).toBe(true);
      // Nor its batch in the address, followed with the next tenant's token ("Batch … is gone").
      expect(await page.evaluate(() => location.hash)).toBe('');
      expect(await page.locator('#error').textContent()).toBe('');

      // Revoked again, on the list (one read a refresh): the first read made with that token is
      // answered only after its holder signed in again. Its 401 is the old token's, and asks nothing.
      let releaseLate!: () => void;
      const lateReleased = new Promise<void>((resolve) => (releaseLate = resolve));
      let lateAnswered!: () => void;
      const lateDone = new Promise<void>((resolve) => (lateAnswered = resolve));
      let holding = false;
      await page.route(
        (url) => url.pathname.startsWith('/v1/'),
        async (route) => {
          if (holding || route.request().headers().authorization !== 'Bearer revoked-token-11111111') return route.continue();
          holding = true;
          const response = await route.fetch();
          await lateReleased;
          await route.fulfill({ response });
          lateAnswered();
        },
      );
      await page.evaluate(() => sessionStorage.setItem('rollcall.token', 'revoked-token-11111111'));
      await page.waitForSelector('#login:not([hidden])'); // a later read's 401
      await page.fill('#token', 'reader-of-tenant-two-2');
      await page.click('#login-form button');
      await page.waitForFunction(() => (document.querySelector('#batches tbody')?.textContent ?? '').includes('tenant-two-batch'));
      releaseLate();
      await lateDone;
      await page.waitForTimeout(300);
      expect(await page.locator('#login').isHidden()).toBe(true);
    });
  });

  it('when a batch has failures, a parent and children, then its page shows them; a producer cancels it', async () => {
    await withService({}, async (svc, url, page) => {
      const parent = await batch(svc, { userKey: 'family' }, 3, 0);
      const child = await batch(svc, { userKey: 'kid', parentItem: parent.ids[0] }, 4, 0);
      await svc.api.post('/v1/acks').send({ ids: child.ids.slice(0, 2), outcome: 'failed', error: 'thumbnail too large' });
      await page.goto(url);
      await page.click(`tr.batch[data-id="${parent.id}"]`);
      await page.waitForFunction((id) => document.querySelector(`#children a[data-id="${id}"]`) !== null, child.id);
      await page.click(`#children a[data-id="${child.id}"]`);
      await page.waitForFunction(() => (document.querySelector('#failures tbody')?.textContent ?? '').includes('thumbnail too large'));
      expect(await page.locator('#failures tbody tr').count()).toBe(2);
      expect(await page.locator('#parent').textContent()).toContain(parent.ids[0]);

      let asked = '';
      page.once('dialog', (dialog) => {
        asked = dialog.message();
        void dialog.dismiss();
      });
      await page.click('#cancel');
      await page.waitForFunction(() => true);
      expect(asked).toContain(child.id);
      expect((await svc.api.get(`/v1/batches/${child.id}`)).body.state).toBe('sealed'); // dismissed: nothing happened

      page.once('dialog', (dialog) => void dialog.accept());
      await page.click('#cancel');
      await page.waitForFunction(() => (document.querySelector('#detail-title')?.textContent ?? '').includes('cancelled'));
      expect((await svc.api.get(`/v1/batches/${child.id}`)).body.state).toBe('cancelled');
      expect(await page.locator('#cancel').isHidden()).toBe(true);
      expect(await page.locator('#timeline').textContent()).toContain('cancelled:');

      await page.click('#parent a');
      await page.waitForFunction((id) => (document.querySelector('#detail-title')?.textContent ?? '').includes(id), parent.id);
      await svc.rollcall.childOutcomes.deliverDue();
      await page.waitForFunction(() => (document.querySelector('#failures tbody')?.textContent ?? '').includes('child batch cancelled'));
      await page.click('#close');
      await page.selectOption('#state', 'cancelled');
      await page.click('#filters button');
      await page.waitForFunction(() => document.querySelectorAll('tr.batch').length === 1);
      expect(await page.locator('tr.batch .state').textContent()).toBe('cancelled · cancelled');
    });
  });

  it("when a tenant's strings hold markup, then the page shows them as text and runs none, under its Content-Security-Policy", async () => {
    await withService({}, async (svc, url, page) => {
      const markup = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>';
      const made = await batch(svc, { userKey: markup, metadata: { note: markup } }, 2, 0);
      await svc.api.post('/v1/acks').send({ ids: [made.ids[0]], outcome: 'failed', error: markup });
      const response = await page.goto(url);
      expect(response?.headers()).toMatchObject({
        'content-security-policy': "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        'x-content-type-options': 'nosniff',
      });
      await page.click(`tr.batch[data-id="${made.id}"]`);
      await page.waitForFunction((text) => (document.querySelector('#failures tbody')?.textContent ?? '').includes(text), markup);
      expect(await page.locator(`tr.batch[data-id="${made.id}"]`).textContent()).toContain(markup);
      expect(await page.locator('#metadata').textContent()).toContain('onerror=\\"window.pwned=1\\"'); // JSON of the metadata, as text
      expect(await page.evaluate(() => [(window as unknown as { pwned?: number }).pwned, document.querySelectorAll('img, script:not([src])').length])).toEqual([
        undefined,
        0,
      ]);
    });
  });

  it('when a refresh read before a cancel answers after it, then the batch stays shown cancelled', async () => {
    await withService({}, async (svc, url, page) => {
      const made = await batch(svc, { userKey: 'late-detail' }, 2, 0);
      await page.goto(url);
      await page.click(`tr.batch[data-id="${made.id}"]`);
      await page.waitForFunction(() => (document.querySelector('#detail-title')?.textContent ?? '').includes('sealed'));
      // The answer to the next read of the batch (a refresh's, read before the cancel) is held until
      // the cancel is shown.
      const late = await holdAnswers(page, (u) => u.pathname === `/v1/batches/${made.id}`);
      await late.held;
      page.once('dialog', (dialog) => void dialog.accept());
      await page.click('#cancel');
      await page.waitForFunction(() => (document.querySelector('#detail-title')?.textContent ?? '').includes('cancelled'));
      const titles = await noteShown(page, '#detail-title');
      late.release();
      await late.delivered();
      await page.waitForResponse((response) => response.url().endsWith(`/v1/batches/${made.id}`)); // a later refresh's
      await page.waitForFunction(() => (document.querySelector('#detail-title')?.textContent ?? '').includes('cancelled'));
      expect((await titles.shown()).filter((content) => !content.text.includes('cancelled'))).toEqual([]);
    });
  });

  it('when another batch was shown before, then a batch just opened shows nothing of it, nor its Cancel button, until its own answer', async () => {
    await withService({}, async (svc, url, page) => {
      const parent = await batch(svc, { userKey: 'opened-before' }, 2, 0);
      const child = await batch(svc, { userKey: 'opened-after', parentItem: parent.ids[0] }, 2, 0);
      await page.goto(url);
      await page.click(`tr.batch[data-id="${parent.id}"]`);
      await page.waitForFunction((id) => document.querySelector(`#children a[data-id="${id}"]`) !== null, child.id);
      expect(await page.locator('#cancel').isVisible()).toBe(true);
      // The child's answers are held: the parent's figures and Cancel button are what the panel holds.
      const late = await holdAnswers(page, (u) => u.pathname === `/v1/batches/${child.id}`, Infinity);
      await page.click(`#children a[data-id="${child.id}"]`);
      await late.held;
      expect(await page.locator('#detail-title').textContent()).toContain(child.id);
      expect(await page.locator('#cancel').isVisible()).toBe(false);
      expect(await page.locator('#children').isVisible()).toBe(false);
      late.release();
      await page.waitForFunction(() => (document.querySelector('#parent')?.textContent ?? '').length > 0);
      expect(await page.locator('#cancel').isVisible()).toBe(true);
      expect(await page.locator('#parent').textContent()).toContain(parent.ids[0]);
    });
  });

  it('when the token may only read, then no cancel button is offered; with produce too, it is', async () => {
    const tokens = JSON.stringify([
      { token: 'dashboard-reader-123456', tenant: 't1', scopes: ['read'] },
      { token: 'producer-token-1234567', tenant: 't1', scopes: ['produce'] },
      { token: 'operator-token-1234567', tenant: 't1', scopes: ['read', 'produce'] },
    ]);
    await withService({ API_TOKENS: tokens }, async (svc, url, page) => {
      const id = (await svc.api.post('/v1/batches').set('Authorization', 'Bearer producer-token-1234567').send({ userKey: 'ro' })).body.id;
      await page.goto(url);
      await page.fill('#token', 'dashboard-reader-123456');
      await page.click('#login-form button');
      await page.click(`tr.batch[data-id="${id}"]`);
      await page.waitForFunction(() => (document.querySelector('#detail-title')?.textContent ?? '').includes('open'));
      expect(await page.locator('#cancel').isHidden()).toBe(true);
      await page.evaluate(() => sessionStorage.setItem('rollcall.token', 'operator-token-1234567'));
      await page.reload(); // the address names the batch: it opens again
      await page.waitForSelector('#cancel:not([hidden])');
    });
  });

  it('when the service answers slowly, then the page has one refresh out at a time, not a pile', async () => {
    await withService({}, async (svc, url, page) => {
      const made = await batch(svc, { userKey: 'slow' }, 2, 0);
      await page.goto(url);
      await page.click(`tr.batch[data-id="${made.id}"]`);
      await page.waitForFunction(() => (document.querySelector('#detail-title')?.textContent ?? '').includes('sealed'));
      // From now on every read is answered 3 s late: a refresh (4 reads) takes longer than the tick.
      let out = 0;
      let most = 0;
      await page.route(
        (u) => u.pathname.startsWith('/v1/'),
        async (route) => {
          most = Math.max(most, ++out);
          const response = await route.fetch();
          await new Promise((resolve) => setTimeout(resolve, 3000));
          await route.fulfill({ response }).catch(() => undefined);
          out -= 1;
        },
      );
      await page.waitForTimeout(7000);
      expect(most).toBeLessThanOrEqual(4); // one refresh's reads; each tick added four more before
    });
  });

  it("when the tenant's rate limit refuses the page's reads, then it waits for Retry-After instead of asking every second", async () => {
    await withService({ TENANT_RATE_LIMIT: '2', TENANT_RATE_WINDOW: '1m' }, async (svc, url, page) => {
      const refused: number[] = [];
      page.on('response', (response) => {
        if (response.status() === 429) refused.push(Date.now());
      });
      await page.goto(url);
      await page.waitForTimeout(8000);
      // Two reads a window pass; then one is refused, and the page waits for the window's end. A
      // window's end inside the 8 s lets two more through and one more refused. Before: a refusal a second.
      expect(refused.length).toBeGreaterThanOrEqual(1);
      expect(refused.length).toBeLessThanOrEqual(2);
    });
  });

  it('when a batch is opened by its address, then it shows, after a reload too, and its text can be selected; deleted, the page says so and goes back to the list', async () => {
    await withService({}, async (svc, url, page) => {
      const made = await batch(svc, { userKey: 'linked' }, 2, 2);
      await batch(svc, { userKey: 'another' }, 1, 0);
      await page.goto(`${url}/#${made.id}`);
      const shown = () => page.waitForFunction((id) => (document.querySelector('#detail-title')?.textContent ?? '').includes(`${id} complete`), made.id);
      await shown();
      await page.reload();
      await shown();
      // Nothing changes in a complete batch: the refreshes leave its id selected, to be copied.
      await page.evaluate(() => getSelection()!.selectAllChildren(document.querySelector('#detail-title')!));
      await page.waitForTimeout(2500);
      expect(await page.evaluate(() => getSelection()!.toString())).toContain(made.id);
      await page.goto(url);
      await page.click(`tr.batch[data-id="${made.id}"]`);
      await shown();
      expect(new URL(page.url()).hash).toBe(`#${made.id}`);
      await page.goBack();
      await page.waitForSelector('#list:not([hidden]) tr.batch');

      await page.goForward();
      await shown();
      expect((await svc.api.delete(`/v1/batches/${made.id}`)).status).toBe(204);
      await page.waitForSelector('#list:not([hidden]) tr.batch');
      expect(await page.locator('#error').textContent()).toContain(`Batch ${made.id} is gone`);
      expect(new URL(page.url()).hash).toBe('');
      expect(await page.locator('tr.batch').count()).toBe(1);
      // Back goes to the list before it, not to the gone batch (which would close at once, forward again).
      const askedForIt: string[] = [];
      page.on('request', (r) => void (r.url().includes(made.id) && askedForIt.push(r.url())));
      await page.goBack();
      await page.waitForTimeout(1500);
      expect(askedForIt).toEqual([]);

      await page.goto(`${url}/#%E0%A4%A`); // a malformed escape names no batch: the list, live
      await page.reload();
      await page.waitForSelector('#list:not([hidden]) tr.batch');
      await svc.api.post('/v1/batches').send({ userKey: 'after-a-malformed-address' });
      await page.waitForFunction(() => (document.querySelector('#batches tbody')?.textContent ?? '').includes('after-a-malformed-address'));
    });
  });

  it('when a parent has more than 100 children, then the page says only the newest are shown; a userKey with a space is matched as typed', async () => {
    await withService({}, async (svc, url, page) => {
      const parent = await batch(svc, { userKey: 'many-children' }, 101, 0);
      for (const item of parent.ids) expect((await svc.api.post('/v1/batches').send({ parentItem: item })).status).toBe(201);
      await batch(svc, { userKey: ' nightly' }, 1, 0);
      await batch(svc, { userKey: 'nightly' }, 1, 0);
      await page.goto(`${url}/#${parent.id}`);
      await page.waitForFunction(() => document.querySelectorAll('#children li').length === 100);
      expect(await page.locator('#children-note').textContent()).toBe('showing the newest 100 child batches');

      await page.click('#close');
      await page.fill('#user-key', ' nightly');
      await page.click('#filters button');
      await page.waitForFunction(() => document.querySelectorAll('tr.batch').length === 1);
      expect(await page.locator('tr.batch td:nth-child(3)').textContent()).toBe(' nightly');
    });
  });

  it('when "Next" is double-clicked, then one page is turned: "Previous" goes back to the first', async () => {
    await withService({}, async (svc, url, page) => {
      for (let i = 0; i < 45; i++) expect((await svc.api.post('/v1/batches').send({ userKey: `turn-${i}` })).status).toBe(201);
      await page.goto(url);
      await page.waitForFunction(() => document.querySelector('tr.batch td:nth-child(3)')?.textContent === 'turn-44');
      // Page 2's answers are held, so both clicks land before it is shown.
      const pageTwo = await holdAnswers(page, (u) => u.pathname === '/v1/batches' && u.searchParams.has('cursor'), Infinity);
      await page.dblclick('#next');
      await pageTwo.held;
      await page.waitForTimeout(300);
      pageTwo.release();
      await page.waitForFunction(() => document.querySelector('tr.batch td:nth-child(3)')?.textContent === 'turn-24');
      await page.click('#prev');
      await page.waitForFunction(() => document.querySelector('tr.batch td:nth-child(3)')?.textContent === 'turn-44');

      // The once-a-second read of page 1 is out when "Next" is clicked, and answers before page 2.
      const timerRead = await holdAnswers(page, (u) => u.pathname === '/v1/batches' && !u.searchParams.has('cursor'));
      await timerRead.held;
      const nextPage = await holdAnswers(page, (u) => u.pathname === '/v1/batches' && u.searchParams.has('cursor'), Infinity);
      await page.click('#next');
      await nextPage.held;
      timerRead.release();
      await timerRead.delivered();
      await page.waitForTimeout(300);
      expect(await page.locator('#next').isDisabled()).toBe(true); // not turned on again by page 1's answer
      nextPage.release();
      await page.waitForFunction(() => document.querySelector('tr.batch td:nth-child(3)')?.textContent === 'turn-24');
    });
  });

  it('when a reader signs in and out, then the token leaves the field and the tab; answers are not stored; a refused cancel says why', async () => {
    const tokens = JSON.stringify([
      { token: 'dashboard-reader-123456', tenant: 't1', scopes: ['read'] },
      { token: 'operator-token-1234567', tenant: 't1', scopes: ['read', 'produce'] },
    ]);
    await withService({ API_TOKENS: tokens }, async (svc, url, page) => {
      const id = (await svc.api.post('/v1/batches').set('Authorization', 'Bearer operator-token-1234567').send({ userKey: 'signed' })).body.id;
      await page.goto(url);
      await page.fill('#token', 'operator-token-1234567');
      const listed = page.waitForResponse((response) => response.url().includes('/v1/batches?') && response.status() === 200);
      await page.click('#login-form button');
      expect((await listed).headers()['cache-control']).toBe('no-store');
      await page.waitForSelector('tr.batch');
      expect(await page.locator('#token').inputValue()).toBe('');

      // The operator's produce scope is taken away meanwhile (here: the cancel is sent with the reader's token).
      await page.click(`tr.batch[data-id="${id}"]`);
      await page.waitForSelector('#cancel:not([hidden])');
      await page.route(
        (u) => u.pathname.endsWith('/cancel'),
        (route) => route.continue({ headers: { ...route.request().headers(), authorization: 'Bearer dashboard-reader-123456' } }),
      );
      page.once('dialog', (dialog) => void dialog.accept());
      await page.click('#cancel');
      await page.waitForFunction(() => /^Could not cancel: .*produce/.test(document.querySelector('#error')?.textContent ?? ''));

      await page.click('#sign-out');
      await page.waitForSelector('#login:not([hidden])');
      expect(await page.evaluate(() => sessionStorage.getItem('rollcall.token'))).toBeNull();
      expect(await page.locator('#detail').isHidden()).toBe(true);
      expect(await page.locator('#batches tbody').textContent()).toBe('');
      expect(await page.locator('#detail').textContent()).not.toContain('signed'); // the batch's metadata is gone from the page too
      expect(await page.locator('#sign-out').isHidden()).toBe(true);
      expect(await page.locator('#login-error').textContent()).toBe('');
      expect(await page.locator('#error').textContent()).toBe(''); // the refused cancel's message is gone too
    });
  });

  it('when a token that may not read is given, then the page says so, and the token leaves the tab', async () => {
    const tokens = JSON.stringify([{ token: 'producer-only-1234567', tenant: 't1', scopes: ['produce'] }]);
    await withService({ API_TOKENS: tokens }, async (_svc, url, page) => {
      await page.goto(url);
      await page.fill('#token', 'producer-only-1234567');
      await page.click('#login-form button');
      await page.waitForFunction(() => /lacks the read scope/.test(document.querySelector('#login-error')?.textContent ?? ''));
      expect(await page.locator('#login').isVisible()).toBe(true);
      expect(await page.evaluate(() => sessionStorage.getItem('rollcall.token'))).toBeNull();
    });
  });
});
