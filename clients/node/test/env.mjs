// The stack the tests run against comes from the environment, set by
// integration/tests/node_client.rs (`make test`), which starts etcd, arbiters and Envoy.
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { LockClient, svidFiles } from "../dist/index.js";

export function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run through integration/tests/node_client.rs`);
  return v;
}

export const prefix = () => env("LOCK_TEST_PREFIX");
export const ttlMs = () => Number(env("LOCK_TEST_TTL")) * 1000;
export const fresh = (p = prefix()) => `${p}/node-${randomBytes(5).toString("hex")}`;
export const sharedPrefix = () => env("LOCK_TEST_SHARED_PREFIX");
/** The test registry's semaphore class: its prefix and its N permits. */
export const semPrefix = () => env("LOCK_TEST_SEM_PREFIX");
export const semPermits = () => Number(env("LOCK_TEST_SEM_PERMITS"));
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// The fence callback of tests whose holds guard no work (onFence is required: ADR-12).
export const unfenced = () => undefined;

/** A client of the test identity (`LOCK`) or the other one (`LOCK_OTHER`). */
export function client(who = "LOCK", options = {}) {
  return new LockClient(env("LOCK_ENDPOINT"), svidFiles(env(`${who}_SVID`), env(`${who}_SVID_KEY`), env("LOCK_CA")), options);
}

/** Whether etcd has `key` (etcdctl with the operator's certificate, which may read /l/). */
export function etcdHas(key) {
  const out = execFileSync(env("LOCK_ETCDCTL"), [
    `--endpoints=${env("LOCK_ETCD")}`, `--cacert=${env("LOCK_ETCD_CA")}`, `--cert=${env("LOCK_ETCD_CERT")}`,
    `--key=${env("LOCK_ETCD_KEY")}`, "get", key, "--keys-only", "-w", "json",
  ], { timeout: 10_000 });
  return Number(JSON.parse(out.toString()).count ?? 0) > 0;
}
