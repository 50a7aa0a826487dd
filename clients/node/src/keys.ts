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

let processInstanceValue: string | undefined;

/**
 * This process among the replicas of its identity: `LOCK_INSTANCE` if set and valid (the
 * pod UID from the downward API), else random, chosen once per process. A sibling's hold
 * is waited for; only this process's own earlier session's hold is a leak.
 */
export function processInstance(): string {
  if (processInstanceValue === undefined) {
    const env = process.env[INSTANCE_ENV] ?? "";
    processInstanceValue = validInstance(env) ? env : `p-${randomBytes(16).toString("hex")}`;
  }
  return processInstanceValue;
}

/** The cluster tag in a session id (bits 55..62; lock_config::shards::tag_of). */
export function tagOf(sessionId: string): number {
  return Number((BigInt(sessionId) >> 55n) & 0xffn);
}
