// Runs a wasm32-wasip1 command module under Node's WASI (V8, the engine family Envoy's
// wasm runtime embeds): `node run-wasi.mjs module.wasm [args...]`. Used by `make bench`
// to time the filter's authoriser inside a wasm engine (filter/src/bin/authoriser_cost.rs).
import { readFile } from 'node:fs/promises';
import { argv, exit } from 'node:process';
import { WASI } from 'node:wasi';

const [path, ...args] = argv.slice(2);
if (!path) {
  console.error('usage: node run-wasi.mjs module.wasm [args...]');
  exit(2);
}
const wasi = new WASI({ version: 'preview1', args: [path, ...args], env: {}, returnOnExit: true });
const module = await WebAssembly.compile(await readFile(path));
const instance = await WebAssembly.instantiate(module, { wasi_snapshot_preview1: wasi.wasiImport });
exit(wasi.start(instance));
