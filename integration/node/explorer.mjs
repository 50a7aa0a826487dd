// Drives lock-admin's explorer in Debian's chromium (headless, playwright-core) for a test
// that changes the store while the page stays open: one JSON command per stdin line, one
// JSON answer per stdout line. The page is never reloaded unless a command says so, so
// what appears on it arrived by the page's own live update.
//
//   node explorer.mjs --url ADMIN [--width W --height H]
//   {"op":"signin","user":"vera"}                 sign in at the IdP (from the explorer)
//   {"op":"open","path":"/explorer?ns=pay"}        navigate
//   {"op":"wait","selector":"...","timeout":MS}   until the selector matches
//   {"op":"gone","selector":"...","timeout":MS}   until it matches nothing
//   {"op":"waitText","selector":"...","text":"1","timeout":MS}
//   {"op":"text","selector":"..."}  {"op":"html"}  {"op":"url"}
//   {"op":"fill","selector":"...","text":"..."}  {"op":"click","selector":"..."}
//   {"op":"press","key":"Tab"}  {"op":"focused"}   keyboard, and what has the focus
//   {"op":"viewport","width":W,"height":H}  {"op":"shot","path":FILE,"full":true}
//   {"op":"get","path":"/explorer/rows?ns=pay"}  a same-origin fetch: status and text
import { parseArgs } from 'node:util';
import readline from 'node:readline';
import { launch } from './browser.mjs';

const { values } = parseArgs({
  options: {
    url: { type: 'string' },
    width: { type: 'string', default: '1280' },
    height: { type: 'string', default: '800' },
  },
});
const base = values.url.replace(/\/$/, '');
const browser = await launch();
const page = await browser.newPage({
  viewport: { width: Number(values.width), height: Number(values.height) },
});
page.setDefaultTimeout(20000);

async function run(c) {
  const timeout = c.timeout ?? 20000;
  switch (c.op) {
    case 'signin':
      await page.goto(`${base}/explorer`);
      await page.click('#signin');
      await page.waitForSelector('#login');
      await page.fill('#login', c.user);
      await page.click('#signin');
      await page.waitForSelector('#operator, #error');
      return { url: page.url(), error: await page.$eval('#error', (e) => e.textContent).catch(() => null) };
    case 'open': {
      const r = await page.goto(base + c.path);
      return { status: r.status() };
    }
    case 'wait':
      await page.waitForSelector(c.selector, { timeout });
      return {};
    case 'gone':
      await page.waitForSelector(c.selector, { state: 'detached', timeout });
      return {};
    case 'waitText':
      await page.waitForFunction(
        ([s, t]) => document.querySelector(s)?.textContent.trim() === t,
        [c.selector, c.text],
        { timeout },
      );
      return {};
    case 'text':
      return { text: await page.textContent(c.selector) };
    case 'html':
      return { html: await page.content() };
    case 'url':
      return { url: page.url() };
    case 'fill':
      await page.fill(c.selector, c.text);
      return {};
    case 'click':
      await Promise.all([page.waitForLoadState(), page.click(c.selector)]);
      await page.waitForLoadState();
      return { url: page.url() };
    case 'press':
      await page.keyboard.press(c.key);
      return {};
    case 'focused':
      return {
        focused: await page.evaluate(() => {
          const e = document.activeElement;
          return e ? `${e.tagName.toLowerCase()}${e.id ? `#${e.id}` : ''} ${e.textContent.trim().slice(0, 60)}` : null;
        }),
      };
    case 'viewport':
      await page.setViewportSize({ width: c.width, height: c.height });
      return {};
    case 'shot':
      await page.screenshot({ path: c.path, fullPage: c.full ?? false });
      return {};
    case 'get':
      return await page.evaluate(async (p) => {
        const r = await fetch(p, { credentials: 'same-origin' });
        return { status: r.status, text: await r.text() };
      }, c.path);
    default:
      throw new Error(`unknown op ${c.op}`);
  }
}

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  let answer;
  try {
    answer = { ok: true, ...(await run(JSON.parse(line))) };
  } catch (err) {
    answer = { ok: false, error: String(err).slice(0, 2000) };
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
}
await browser.close();
