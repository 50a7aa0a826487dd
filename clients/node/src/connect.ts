// The channel to the lock edge, in one of the ways a workload holds its identity: X.509-SVID
// files (written by the SPIRE agent or spiffe-helper), or its mesh sidecar, which presents
// the SVID for it. Envoy sees the workload's SPIFFE ID on the TLS connection it terminates;
// nothing the client sends in a header is believed.

import * as grpc from "@grpc/grpc-js";
import { readFileSync, statSync } from "node:fs";
import { isIP } from "node:net";
import { Unauthenticated } from "./errors.js";

/** The workload's X.509-SVID as PEM files; a rewrite (rotation) is picked up by the next call. */
export interface SvidFiles {
  kind: "files";
  cert: string;
  key: string;
  /** The trust bundle that signed Envoy's certificate. */
  bundle: string;
  /** The name verified in Envoy's certificate (default `localhost`). */
  serverName?: string;
}

/** The workload's mesh sidecar originates mutual TLS with the workload's SVID; the client
 * speaks plaintext HTTP/2 to it, allowed only to a loopback address. */
export interface MeshSidecar {
  kind: "meshSidecar";
}

export type Credentials = SvidFiles | MeshSidecar;

export function svidFiles(cert: string, key: string, bundle: string, serverName = "localhost"): SvidFiles {
  return { kind: "files", cert, key, bundle, serverName };
}

export function meshSidecar(): MeshSidecar {
  return { kind: "meshSidecar" };
}

/**
 * The `host:port` target of `endpoint`; throws unless it is https:// (own TLS) or http://
 * to a loopback host (the sidecar). The same rule as the Rust and Python clients.
 */
export function checkEndpoint(endpoint: string, plaintext: boolean): string {
  const at = endpoint.indexOf("://");
  if (at < 0) throw new TypeError(`endpoint ${JSON.stringify(endpoint)}: expected https://host:port`);
  const scheme = endpoint.slice(0, at);
  const authority = endpoint.slice(at + 3).split("/", 1)[0] ?? "";
  if (scheme === "https" && !plaintext) return authority;
  if (scheme === "http" && plaintext) {
    if (isLoopback(authority)) return authority;
    throw new TypeError(`endpoint ${JSON.stringify(endpoint)}: plaintext goes only to the workload's sidecar on loopback (127.0.0.0/8, ::1, localhost)`);
  }
  if (scheme === "http") {
    throw new TypeError(`endpoint ${JSON.stringify(endpoint)} is plaintext: use https:// with SVID files, or meshSidecar() for a local sidecar`);
  }
  throw new TypeError(
    plaintext
      ? `endpoint ${JSON.stringify(endpoint)}: the mesh sidecar is reached over http://127.0.0.1:PORT`
      : `endpoint ${JSON.stringify(endpoint)}: expected https://host:port`,
  );
}

function isLoopback(authority: string): boolean {
  let host: string;
  if (authority.startsWith("[")) host = authority.slice(1).split("]", 1)[0] ?? "";
  else host = authority.includes(":") ? authority.slice(0, authority.lastIndexOf(":")) : authority;
  if (host.toLowerCase() === "localhost") return true;
  if (isIP(host) === 4) return host.startsWith("127.");
  if (isIP(host) === 6) return host === "::1" || host === "0:0:0:0:0:0:0:1";
  return false;
}

/** What the credentials looked like when the channel was built: a change is a rotation. */
export function stamp(credentials: Credentials): string {
  if (credentials.kind !== "files") return "";
  return [credentials.cert, credentials.key, credentials.bundle]
    .map((p) => {
      try {
        return String(statSync(p).mtimeMs);
      } catch {
        return "-";
      }
    })
    .join(",");
}

/** HTTP/2 PINGs on the one connection, idle or not: a silently dead path breaks within seconds. */
const CHANNEL_OPTIONS: grpc.ChannelOptions = {
  "grpc.keepalive_time_ms": 20_000,
  "grpc.keepalive_timeout_ms": 5_000,
  "grpc.keepalive_permit_without_calls": 1,
  "grpc.http2.max_pings_without_data": 0,
};

export function channelArgs(endpoint: string, credentials: Credentials): { target: string; creds: grpc.ChannelCredentials; options: grpc.ChannelOptions } {
  if (credentials.kind === "meshSidecar") {
    return { target: checkEndpoint(endpoint, true), creds: grpc.credentials.createInsecure(), options: CHANNEL_OPTIONS };
  }
  const target = checkEndpoint(endpoint, false);
  const read = (p: string): Buffer => {
    try {
      return readFileSync(p);
    } catch (e) {
      throw new Unauthenticated(`${p}: ${(e as Error).message}`);
    }
  };
  const creds = grpc.credentials.createSsl(read(credentials.bundle), read(credentials.key), read(credentials.cert));
  return { target, creds, options: { ...CHANNEL_OPTIONS, "grpc.ssl_target_name_override": credentials.serverName ?? "localhost" } };
}
