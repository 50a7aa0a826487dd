// The key as `lock-key` request metadata (the edge's fast path) and this process's
// instance (`lock-instance`). The same rules as lock_config::edge_headers::encode_key and
// lock_config::instance in Rust, and the Python client's keys.py.

import { randomBytes } from "node:crypto";

export const METADATA_KEY = "lock-key";
export const INSTANCE_METADATA = "lock-instance";
export const INSTANCE_ENV = "LOCK_INSTANCE";

/** Every printable ASCII byte but `%` as is, every other byte of the UTF-8 key as `%XX`. */
export function encodeKey(key: string): string {
  let out = "";
  for (const b of Buffer.from(key, "utf8")) {
    out += b >= 0x21 && b <= 0x7e && b !== 0x25 ? String.fromCharCode(b) : "%" + b.toString(16).toUpperCase().padStart(2, "0");
  }
  return out;
}

const INSTANCE_OK = /^[A-Za-z0-9._:-]{1,253}$/;

/** The service's rule for `lock-instance` (a pod UID or name). */
export function validInstance(value: string): boolean {
  return INSTANCE_OK.test(value);
}

/**
 * The instance rule (issue 50), pure: `<prefix>:<pid>:<n>`, where the prefix is
 * `prefixEnv` (the value of LOCK_INSTANCE) when it is set and valid and the whole instance
 * stays a valid `lock-instance` (at most 253 characters), else `randomPrefix`.
 */
export function instanceFor(prefixEnv: string | undefined, pid: number, n: number | bigint, randomPrefix: string): string {
  if (prefixEnv !== undefined && validInstance(prefixEnv)) {
    const instance = `${prefixEnv}:${pid}:${n}`;
    if (validInstance(instance)) return instance;
  }
  return `${randomPrefix}:${pid}:${n}`;
}

let processPrefix: { env: string | undefined; random: string } | undefined;
let clientCount = 0;

/**
 * The instance of the next client object of this process (issues 32, 50):
 * `<prefix>:<pid>:<n>`. The prefix is LOCK_INSTANCE (the pod UID from the downward API,
 * read once per process) or a random `p-<16 hex>` chosen once per process; `n` counts the
 * calls from 1 (each LockClient built without an explicit instance takes one).
 *
 * Replicas of one identity are told apart by it: a sibling's hold is waited for, only this
 * client's own earlier session's hold is a leak. Worker processes of one pod (other pids)
 * and two clients of one process (other `n`) queue; a restarted container process, often
 * pid 1 again with its first client again, gets its previous life's instance and is told
 * LEAKED_HOLD when it meets its own old hold.
 */
export function processInstance(): string {
  processPrefix ??= { env: process.env[INSTANCE_ENV], random: `p-${randomBytes(8).toString("hex")}` };
  clientCount += 1;
  return instanceFor(processPrefix.env, process.pid, clientCount, processPrefix.random);
}

/** The cluster tag in a session id (bits 55..62; lock_config::shards::tag_of). */
export function tagOf(sessionId: string): number {
  return Number((BigInt(sessionId) >> 55n) & 0xffn);
}
