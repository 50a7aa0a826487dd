// Completes an OAuth device sign-in (RFC 8628) in Debian's chromium, as the operator
// would on their phone or laptop: opens the verification URL lockctl printed, confirms
// the code, signs in at the test IdP as --user. Prints one JSON line.
//
//   node device.mjs --url VERIFICATION_URI_COMPLETE --user bob
import { parseArgs } from 'node:util';
import { launch } from './browser.mjs';

const { values } = parseArgs({ options: { url: { type: 'string' }, user: { type: 'string' } } });
const browser = await launch();
const out = {};
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(20000);
  await page.goto(values.url);
  // The IdP's "confirm this code" page.
  await page.click('button[autofocus]');
  await page.waitForSelector('#login');
  await page.fill('#login', values.user);
  await page.click('#signin');
  await page.waitForLoadState('load');
  out.text = (await page.textContent('body')).trim().replace(/\s+/g, ' ');
} catch (err) {
  out.error = String(err);
} finally {
  await browser.close();
}
process.stdout.write(`${JSON.stringify(out)}\n`);
