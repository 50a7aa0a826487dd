package io.github.fencedlock.lock;

import java.net.InetAddress;
import java.net.URI;
import java.net.URISyntaxException;
import java.net.UnknownHostException;

/**
 * An endpoint checked: https:// for the client's own TLS, http:// only to a loopback host
 * (the workload's mesh sidecar), as the Rust and Go clients decide.
 */
final class Endpoint {
    final String host;
    final int port;

    private Endpoint(String host, int port) {
        this.host = host;
        this.port = port;
    }

    static Endpoint parse(String endpoint, boolean plaintext) {
        URI u;
        try {
            u = new URI(endpoint);
        } catch (URISyntaxException e) {
            throw new IllegalArgumentException("lock: endpoint \"" + endpoint + "\": expected https://host:port");
        }
        String scheme = u.getScheme();
        if (scheme == null || u.getHost() == null || u.getPort() <= 0) {
            throw new IllegalArgumentException("lock: endpoint \"" + endpoint + "\": expected https://host:port");
        }
        String host = u.getHost();
        if (host.startsWith("[") && host.endsWith("]")) {
            host = host.substring(1, host.length() - 1);
        }
        if (scheme.equals("https") && !plaintext) {
            return new Endpoint(host, u.getPort());
        }
        if (scheme.equals("http") && plaintext) {
            if (isLoopback(host)) {
                return new Endpoint(host, u.getPort());
            }
            throw new IllegalArgumentException("lock: endpoint \"" + endpoint
                    + "\": plaintext goes only to the workload's sidecar on loopback (127.0.0.0/8, ::1, localhost)");
        }
        if (scheme.equals("http")) {
            throw new IllegalArgumentException("lock: endpoint \"" + endpoint
                    + "\" is plaintext: use https:// with SVID files or the Workload API, or meshSidecar() for a local sidecar");
        }
        if (plaintext) {
            throw new IllegalArgumentException("lock: endpoint \"" + endpoint
                    + "\": the mesh sidecar is reached over http://127.0.0.1:PORT");
        }
        throw new IllegalArgumentException("lock: endpoint \"" + endpoint + "\": expected https://host:port");
    }

    /** localhost, or an IP literal in 127.0.0.0/8 or ::1. A name is never resolved here. */
    static boolean isLoopback(String host) {
        if (host.equalsIgnoreCase("localhost")) {
            return true;
        }
        boolean literal = host.contains(":") || host.matches("[0-9.]+");
        if (!literal) {
            return false;
        }
        try {
            return InetAddress.getByName(host).isLoopbackAddress();
        } catch (UnknownHostException e) {
            return false;
        }
    }
}
