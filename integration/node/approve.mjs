// Drives the approval page in Debian's chromium (headless, playwright-core): signs in at
// the test IdP as --user, reads the page, optionally approves request --approve, and
// prints what it saw as one JSON line.
//
//   node approve.mjs --url ADMIN --user bob [--approve ID] [--screenshot FILE]
//                    [--screenshot-pending FILE]   (before approving)
import { parseArgs } from 'node:util';
import { launch } from './browser.mjs';

const { values } = parseArgs({
  options: {
    url: { type: 'string' },
    user: { type: 'string' },
    approve: { type: 'string' },
    screenshot: { type: 'string' },
    'screenshot-pending': { type: 'string' },
  },
});

const browser = await launch();
const out = {};
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
  page.setDefaultTimeout(20000);
  await page.goto(values.url);
  await page.click('#signin');
  // The IdP's sign-in form.
  await page.waitForSelector('#login');
  await page.fill('#login', values.user);
  await page.click('#signin');
  await page.waitForSelector('#operator');
  out.operator = await page.textContent('#operator');
  const ids = (sel, prefix) => page.$$eval(sel, (els, p) => els.map((e) => e.id.slice(p.length)), prefix);
  out.pending = await ids('div.request', 'request-');
  out.approveButtons = await ids('button.approve', 'approve-');
  out.warnings = await page.$$eval('p.warn', (els) => els.map((e) => e.textContent));
  out.enforcement = await page.$$eval('td.enforcement', (els) => els.map((e) => e.textContent));
  if (values['screenshot-pending']) {
    await page.screenshot({ path: values['screenshot-pending'], fullPage: true });
  }
  if (values.approve) {
    const button = await page.$(`#approve-${values.approve}`);
    if (!button) {
      out.error = 'no approve button';
    } else {
      await button.click();
      await page.waitForSelector('#notice, #error');
      out.notice = await page.$eval('#notice', (e) => e.textContent).catch(() => null);
      out.error = await page.$eval('#error', (e) => e.textContent).catch(() => null);
    }
  }
  if (values.screenshot) await page.screenshot({ path: values.screenshot, fullPage: true });
} catch (err) {
  out.error = String(err);
} finally {
  await browser.close();
}
process.stdout.write(`${JSON.stringify(out)}\n`);
