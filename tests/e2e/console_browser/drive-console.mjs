// Drives the operator console (/admin) in Debian's headless Chromium with
// playwright-core. Run by tests/e2e/test_console_browser.py, which starts
// the daemon and prepares the fleet; everything comes in the environment:
//
//   CONSOLE_URL       base URL of the daemon (http://127.0.0.1:PORT)
//   CONSOLE_TOKEN     the daemon's token
//   CONSOLE_MODE      "empty": a fresh daemon (token handling, empty states,
//                     and the /docs page)
//                     "fleet": sandboxes and an execution exist (below)
//   CONSOLE_SHOTS     directory for the screenshots
//   CHROMIUM          the browser (default /usr/bin/chromium)
//   fleet mode:       SANDBOX_ID, SCOPE, OTHER_SANDBOX_ID, OTHER_SCOPE,
//                     EXEC_ID, EXIT_CODE, MARKER (printed by the execution
//                     on stdout, "stderr-" + MARKER on stderr), BUSY_SANDBOX_ID
//                     (a sandbox with an execution in flight: release is
//                     refused with 409), LIVE_EXEC_ID (running, printing
//                     live-1, live-2, ... every half second)
//                     "terminal": TERMINAL_SANDBOX_ID is live: its Terminal
//                     button opens a shell (xterm.js over a WebSocket); a
//                     command typed there shows its output, writes
//                     /workspace/from-console.txt (MARKER), and `exit 4`
//                     ends it
//                     "restarted": the daemon restarted since STALE_SANDBOX_ID
//                     was created (its route still says READY, its owner is
//                     gone); FRESH_SANDBOX_ID was created after the restart
//
// Fails (exit 1) on any failed step, any console error, any uncaught page
// error, any failed request and any request to a non-loopback address.
import { chromium } from 'playwright-core';
import path from 'node:path';

const env = process.env;
const need = name => {
  if (!env[name]) throw new Error(`environment variable ${name} is not set`);
  return env[name];
};
const BASE = need('CONSOLE_URL');
const TOKEN = need('CONSOLE_TOKEN');
const MODE = need('CONSOLE_MODE');
const SHOTS = need('CONSOLE_SHOTS');
const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]']);
const TIMEOUT = 15000;

const problems = [];
// The HTTP error a step provokes on purpose (Chromium logs every failed
// response as a console error): the wrong token's 401, the busy release's 409.
let expectedStatus = null;
let requests = 0;

function log(msg) { console.log(`[console-test] ${msg}`); }

async function step(name, fn) {
  log(`step: ${name}`);
  await fn();
}

// Waits until `selector` is shown and its text contains `text`.
async function waitText(page, selector, text) {
  try {
    await page.waitForFunction(([sel, sub]) => {
      const n = document.querySelector(sel);
      return n && !n.closest('[hidden]') && n.textContent.includes(sub);
    }, [selector, text], { timeout: TIMEOUT });
  } catch (e) {
    const actual = await page.evaluate(sel => {
      const n = document.querySelector(sel);
      return n ? `${n.closest('[hidden]') ? '(hidden) ' : ''}${JSON.stringify(n.textContent)}` : '(absent)';
    }, selector);
    throw new Error(`${selector} never showed ${JSON.stringify(text)}; it shows ${actual}`);
  }
}

async function hidden(page, selector) {
  return page.evaluate(sel => !!document.querySelector(sel).closest('[hidden]'), selector);
}

function check(cond, msg) { if (!cond) throw new Error(msg); }

async function signIn(page, token) {
  await page.locator('#token').fill(token);
  await page.locator('#login-form button[type=submit]').click();
}

async function storage(page) {
  return page.evaluate(() => ({
    session: Object.fromEntries(Object.entries(sessionStorage)),
    local: localStorage.length,
    cookie: document.cookie,
  }));
}

async function emptyFleet(page) {
  await step('the page asks for the token', async () => {
    await page.locator('#token').waitFor({ state: 'visible', timeout: TIMEOUT });
    check(await hidden(page, '#console'), 'the console is shown before a token was entered');
  });
  await step('a wrong token shows the error state and is not kept', async () => {
    expectedStatus = 401;
    await signIn(page, 'not-the-token');
    await waitText(page, '#login-error', 'SANDBOX_UNAUTHORIZED');
    await waitText(page, '#login-error', 'HTTP 401');
    expectedStatus = null;
    check(await hidden(page, '#console'), 'the console stays shown after a 401');
    await page.locator('#token').waitFor({ state: 'visible', timeout: TIMEOUT });
    const s = await storage(page);
    check(Object.keys(s.session).length === 0, `a refused token stays in sessionStorage: ${JSON.stringify(s)}`);
    await page.screenshot({ path: path.join(SHOTS, 'wrong-token.png') });
  });
  await step('the right token opens the console on an empty fleet', async () => {
    await signIn(page, TOKEN);
    await waitText(page, '#sbx-empty', 'No sandboxes yet');
    await waitText(page, '#ex-empty', 'No executions yet');
    await waitText(page, '#templates-state', 'No templates published yet');
    await waitText(page, '#workers-body', 'live');
    await waitText(page, '#fleet-cards', 'workers live');
    await waitText(page, '#reclamation-list', 'Idle sandbox released after');
    check(await hidden(page, '#login'), 'the token form is still shown');
  });
  await step('the token is in sessionStorage only', async () => {
    const s = await storage(page);
    check(Object.values(s.session).includes(TOKEN), `token not in sessionStorage: ${JSON.stringify(Object.keys(s.session))}`);
    check(s.local === 0 && s.cookie === '', `token leaked to localStorage or cookies: ${s.local} ${JSON.stringify(s.cookie)}`);
  });
  await step('a reload keeps the session', async () => {
    await page.reload();
    await waitText(page, '#sbx-empty', 'No sandboxes yet');
  });
  await page.screenshot({ path: path.join(SHOTS, 'empty-fleet.png'), fullPage: true });
  await step('"Forget token" clears it and returns to the form', async () => {
    await page.locator('#forget').click();
    await waitText(page, '#login-notice', 'Token forgotten');
    check(await hidden(page, '#console'), 'the console is still shown after forgetting the token');
    const s = await storage(page);
    check(Object.keys(s.session).length === 0, `sessionStorage not cleared: ${JSON.stringify(Object.keys(s.session))}`);
  });
  await step('/docs renders /openapi.json in Swagger UI, from this server only', async () => {
    const r = await page.goto(BASE + '/docs');
    check(r && r.status() === 200, `GET /docs answered ${r && r.status()}`);
    await waitText(page, '#state', 'operations.');
    const spec = await (await page.request.get(BASE + '/openapi.json')).json();
    const want = Object.values(spec.paths).reduce((n, item) => n + Object.keys(item).length, 0);
    const shown = await page.locator('.opblock').count();
    check(shown === want, `Swagger UI shows ${shown} operations, the document has ${want}`);
    await waitText(page, '#swagger-ui', '/api/v1/sandboxes/{sandbox_id}/exec');
    // Open one operation: its description, parameters and error codes show.
    await page.locator('#operations-default-execCommand').click();
    await waitText(page, '#operations-default-execCommand', 'The call ends when the command');
    await waitText(page, '#operations-default-execCommand', 'STALE_SANDBOX_ROUTE');
    await page.screenshot({ path: path.join(SHOTS, 'docs.png'), fullPage: true });
  });
}

async function fleet(page) {
  const sid = need('SANDBOX_ID'), scope = need('SCOPE');
  const other = need('OTHER_SANDBOX_ID'), otherScope = need('OTHER_SCOPE');
  const eid = need('EXEC_ID'), exitCode = need('EXIT_CODE'), marker = need('MARKER');
  const busy = need('BUSY_SANDBOX_ID'), template = need('TEMPLATE');
  const row = id => `#sbx-body tr[data-sandbox-id="${id}"]`;

  await step('sign in and see both sandboxes', async () => {
    await signIn(page, TOKEN);
    await waitText(page, row(sid), scope);
    await waitText(page, row(sid), 'READY');
    await waitText(page, row(other), otherScope);
  });
  await step('see the published template and unpublish it', async () => {
    await waitText(page, '#templates-list', template);
    await waitText(page, '#templates-state', '1 template(s) in the catalog');
    page.once('dialog', d => d.accept());
    await page.locator(`#templates-list li[data-template="${template}"] button`).click();
    await waitText(page, '#templates-state', 'No templates published yet');
  });
  await step('filter sandboxes by scope', async () => {
    await page.locator('#sbx-scope').fill(otherScope);
    await page.locator('#sbx-filters button[type=submit]').click();
    await page.locator(row(sid)).waitFor({ state: 'detached', timeout: TIMEOUT });
    await waitText(page, row(other), otherScope);
    await page.locator('#sbx-clear').click();
    await waitText(page, row(sid), scope);
  });
  await step('filter sandboxes by status', async () => {
    await page.locator('#sbx-status').selectOption('RELEASED');
    await page.locator('#sbx-filters button[type=submit]').click();
    await waitText(page, '#sbx-empty', 'No sandboxes match these filters');
    await page.locator('#sbx-clear').click();
    await waitText(page, row(sid), scope);
  });
  const execRow = `#ex-body tr[data-exec-id="${eid}"]`;
  await step('the execution is listed with its exit code', async () => {
    await waitText(page, execRow, sid);
    const code = (await page.locator(`${execRow} td.exit-code`).textContent()).trim();
    check(code === exitCode, `exit code shown as ${JSON.stringify(code)}, expected ${exitCode}`);
  });
  await step('its output opens, as text', async () => {
    await page.locator(execRow).click();
    await waitText(page, '#output-stdout', marker);
    await waitText(page, '#output-stderr', 'stderr-' + marker);
    await waitText(page, '#output-meta', `exit code ${exitCode}`);
    // The marker holds markup: it must show literally, not become elements.
    const children = await page.locator('#output-stdout *, #output-stderr *').count();
    check(children === 0, `the output was rendered as HTML (${children} elements inside)`);
    await page.screenshot({ path: path.join(SHOTS, 'exec-output.png'), fullPage: true });
    await page.locator('#output-close').click();
    await page.locator('#output').waitFor({ state: 'hidden', timeout: TIMEOUT });
  });
  await step('every time on the page is UTC and says so', async () => {
    await waitText(page, '#tz', 'All times are UTC.');
    const times = await page.locator(`${row(sid)} td:nth-child(6), ${execRow} td:first-child`).allTextContents();
    check(times.length === 2 && times.every(t => / UTC$/.test(t.trim())), `times: ${JSON.stringify(times)}`);
    await waitText(page, '#status', ' UTC');
  });
  const liveRow = `#ex-body tr[data-exec-id="${need('LIVE_EXEC_ID')}"]`;
  await step('a running execution\'s output grows while it is open', async () => {
    await waitText(page, liveRow, 'RUNNING');
    await page.locator(liveRow).click();
    await waitText(page, '#output-meta', 'following');
    await waitText(page, '#output-stdout', 'live-2');
    // Lines that come after the panel opened, however late it opened: the
    // command prints one every 0.5 s for 30 s.
    const shown = await page.locator('#output-stdout').textContent();
    const last = Math.max(...[...shown.matchAll(/live-(\d+)/g)].map((m) => Number(m[1])));
    const before = shown.length;
    await waitText(page, '#output-stdout', `live-${last + 2}`);
    const after = (await page.locator('#output-stdout').textContent()).length;
    check(after > before, `the output did not grow (${before} -> ${after})`);
    await page.locator('#output-close').click();
    await page.locator('#output').waitFor({ state: 'hidden', timeout: TIMEOUT });
  });
  const bigRow = `#ex-body tr[data-exec-id="${need('BIG_EXEC_ID')}"]`;
  await step('a large output shows its beginning at once, all of it on request', async () => {
    await page.locator(bigRow).click();
    await waitText(page, '#output-meta', 'SUCCEEDED');
    const shown = (await page.locator('#output-stdout').textContent()).length;
    check(shown === 65536, `the preview shows ${shown} characters`);
    await waitText(page, '#output .show-all', 'Show all (');
    await page.locator('#output .show-all').click();
    const all = (await page.locator('#output-stdout').textContent()).length;
    check(all === Number(need('BIG_LEN')), `after "show all": ${all} characters`);
    check(await page.locator('#output .show-all').count() === 0, 'the button stays after use');
    await page.locator('#output-close').click();
    await page.locator('#output').waitFor({ state: 'hidden', timeout: TIMEOUT });
  });
  await step('filter executions by what ended them', async () => {
    const cancelled = need('CANCELLED_EXEC_ID');
    await page.locator('#ex-reason').selectOption('CANCELLED_BY_CLIENT');
    await page.locator('#ex-filters button[type=submit]').click();
    await waitText(page, `#ex-body tr[data-exec-id="${cancelled}"]`, 'CANCELLED_BY_CLIENT');
    await page.locator(execRow).waitFor({ state: 'detached', timeout: TIMEOUT });
    await page.locator('#ex-clear').click();
    await waitText(page, execRow, sid);
  });
  await step('a refused release shows the error code and message', async () => {
    expectedStatus = 409;
    page.once('dialog', d => d.accept());
    await page.locator(`${row(busy)} button.release`).click();
    await waitText(page, '#sbx-error', `Could not release ${busy}: SANDBOX_BUSY_OR_STALE`);
    await waitText(page, '#sbx-error', 'HTTP 409');
    expectedStatus = null;
    await waitText(page, row(busy), 'RUNNING');
    check(!(await page.locator(`${row(busy)} button.release`).isDisabled()), 'Release stays disabled after a refusal');
    await page.screenshot({ path: path.join(SHOTS, 'release-refused.png'), fullPage: true });
  });
  await step('release the sandbox through its button', async () => {
    let asked = '';
    page.once('dialog', d => { asked = d.message(); d.accept(); });
    await page.locator(`${row(sid)} button.release`).click();
    await waitText(page, '#sbx-notice', `Sandbox ${sid} released`);
    check(asked.includes(sid), `the confirmation did not name the sandbox: ${JSON.stringify(asked)}`);
    await waitText(page, row(sid), 'RELEASED');
    check(await page.locator(`${row(sid)} button.release`).isDisabled(), 'Release stays enabled on a RELEASED sandbox');
    await waitText(page, row(other), 'READY');
  });
  await page.screenshot({ path: path.join(SHOTS, 'fleet.png'), fullPage: true });
}

async function terminal(page) {
  const sid = need('TERMINAL_SANDBOX_ID'), marker = need('MARKER');
  const row = `#sbx-body tr[data-sandbox-id="${sid}"]`;
  await step('sign in and open the sandbox\'s terminal', async () => {
    await signIn(page, TOKEN);
    await waitText(page, row, 'READY');
    await page.locator(`${row} button.terminal`).click();
    await waitText(page, '#term-state', 'Connected · terminal-');
    await waitText(page, '#term-state', '100×30');
  });
  await step('type a command and see its output on the terminal', async () => {
    await waitText(page, '#term-screen .xterm-rows', 'workspace#');
    await page.keyboard.type('echo hi-$((6*7))');
    await page.keyboard.press('Enter');
    await waitText(page, '#term-screen .xterm-rows', 'hi-42');
    await page.keyboard.type(`echo ${marker} > /workspace/from-console.txt; tput cols`);
    await page.keyboard.press('Enter');
    await waitText(page, '#term-screen .xterm-rows', '100');
    await page.screenshot({ path: path.join(SHOTS, 'terminal.png'), fullPage: true });
  });
  await step('exit: the console says how the shell ended', async () => {
    await page.keyboard.type('exit 4');
    await page.keyboard.press('Enter');
    await waitText(page, '#term-state', 'exit code 4');
    await page.locator('#term-close').click();
    await page.locator('#term').waitFor({ state: 'hidden', timeout: TIMEOUT });
  });
}

async function restarted(page) {
  const stale = need('STALE_SANDBOX_ID'), fresh = need('FRESH_SANDBOX_ID');
  const row = id => `#sbx-body tr[data-sandbox-id="${id}"]`;
  await step('sign in: the stale route is badged, the fresh one is not', async () => {
    await signIn(page, TOKEN);
    await waitText(page, row(stale), 'READY');
    await waitText(page, row(stale), 'owner gone · resolve again');
    await waitText(page, row(fresh), 'READY');
    const badged = await page.locator(`${row(fresh)} .owner-gone`).count();
    check(badged === 0, `the fresh sandbox shows ${badged} owner-gone badge(s)`);
    const title = await page.locator(`${row(stale)} .owner-gone`).getAttribute('title');
    check(title && title.includes('resolves it again'), `badge title: ${title}`);
  });
  await page.screenshot({ path: path.join(SHOTS, 'restarted.png'), fullPage: true });
}

async function main() {
  const browser = await chromium.launch({
    executablePath: env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    // --no-sandbox: the tests run as root, where Chromium's sandbox refuses
    // to start. The rest keeps Chromium from calling out on its own.
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  let page;
  try {
    const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    page = await context.newPage();
    page.on('console', m => {
      if (m.type() !== 'error') return;
      if (expectedStatus && m.text().includes(`status of ${expectedStatus} `)) {
        log(`expected: ${m.text()}`);
        return;
      }
      problems.push(`console error: ${m.text()}`);
    });
    page.on('pageerror', e => problems.push(`uncaught page error: ${e.message}`));
    page.on('requestfailed', r => {
      // Closing a followed output aborts its stream on purpose.
      if (r.failure()?.errorText === 'net::ERR_ABORTED' && r.url().includes('/stream?')) return;
      problems.push(`request failed: ${r.method()} ${r.url()} ${r.failure()?.errorText}`);
    });
    page.on('request', r => {
      requests++;
      const u = new URL(r.url());
      if (u.protocol === 'data:' || u.protocol === 'about:') return;
      if (!LOOPBACK.has(u.hostname)) problems.push(`request to a non-loopback address: ${r.method()} ${r.url()}`);
    });
    page.on('dialog', d => {
      if (MODE === 'fleet') return; // the release step answers its confirmation
      problems.push(`unexpected dialog: ${d.message()}`);
      d.dismiss();
    });

    await step(`open ${BASE}/admin`, async () => {
      const r = await page.goto(BASE + '/admin');
      check(r && r.status() === 200, `GET /admin answered ${r && r.status()}`);
    });
    if (MODE === 'empty') await emptyFleet(page);
    else if (MODE === 'fleet') await fleet(page);
    else if (MODE === 'restarted') await restarted(page);
    else if (MODE === 'terminal') await terminal(page);
    else throw new Error(`unknown CONSOLE_MODE ${MODE}`);
    check(requests > 1, 'no request was observed: the request check saw nothing');
  } catch (e) {
    if (page) await page.screenshot({ path: path.join(SHOTS, `failure-${MODE}.png`), fullPage: true }).catch(() => {});
    problems.unshift(`step failed: ${e.message}`);
  } finally {
    await browser.close();
  }
  if (problems.length) {
    for (const p of problems) console.error(`[console-test] FAIL ${p}`);
    process.exit(1);
  }
  log(`ok (${MODE}): ${requests} requests, all to loopback`);
}

main().catch(e => {
  console.error(`[console-test] FAIL ${e.stack || e}`);
  process.exit(1);
});
