// Debian's chromium, headless, through playwright-core (installed in .deps/node-tools, named
// by LOCK_NODE_TOOLS). The flags keep it off the network this machine does not have.
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const tools = createRequire(`${process.env.LOCK_NODE_TOOLS}/package.json`);
// playwright-core is CommonJS: its exports arrive as the module's default.
const playwright = await import(pathToFileURL(tools.resolve('playwright-core')));
const { chromium } = playwright.default ?? playwright;

export function launch() {
  return chromium.launch({
    executablePath: process.env.LOCK_CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}
