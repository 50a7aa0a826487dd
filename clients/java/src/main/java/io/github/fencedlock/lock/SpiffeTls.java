package io.github.fencedlock.lock;

import io.grpc.netty.shaded.io.grpc.netty.GrpcSslContexts;
import io.grpc.netty.shaded.io.netty.handler.ssl.SslContext;
import java.net.Socket;
import java.security.Principal;
import java.security.PrivateKey;
import java.security.cert.CertificateException;
import java.security.cert.X509Certificate;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Enumeration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLException;
import javax.net.ssl.SSLSession;
import javax.net.ssl.SSLSessionContext;
import javax.net.ssl.X509ExtendedKeyManager;
import javax.net.ssl.X509ExtendedTrustManager;

/**
 * The client's side of SPIFFE mutual TLS, over a source of {@link SvidMaterial} asked again
 * at every handshake (SVID files read again when they change, or the Workload API's latest
 * push): the key manager presents the current SVID, and the trust manager verifies the
 * edge's chain with the current bundle and authorises it by its exact SPIFFE ID (the leaf's
 * single URI SAN), not by a host name.
 */
final class SpiffeTls {
    private static final String ALIAS_PREFIX = "svid-";
    /**
     * How many materials the key manager remembers by alias: a handshake asks for the chain
     * and then the key, and a rotation between the two must not pair the new chain with the
     * old key. Two would do; a few cover handshakes that overlap a burst of rotations.
     */
    private static final int PINNED = 4;

    private final Supplier<SvidMaterial> source;
    private final String serverId;
    private final Map<String, SvidMaterial> pinned = new LinkedHashMap<>() {
        private static final long serialVersionUID = 1L;

        @Override
        protected boolean removeEldestEntry(Map.Entry<String, SvidMaterial> eldest) {
            return size() > PINNED;
        }
    };
    /** The leaf the last handshake presented: what the edge saw (tests read it). */
    private volatile X509Certificate presented;
    /** The context sslContext built, whose session cache forgetSessions empties. */
    private volatile SslContext context;

    SpiffeTls(Supplier<SvidMaterial> source, String serverId) {
        this.source = source;
        this.serverId = checkSpiffeId(serverId);
    }

    /** A SPIFFE ID as the edge's expected ID: spiffe://trust-domain/path. */
    static String checkSpiffeId(String id) {
        if (id == null || !id.startsWith("spiffe://") || id.length() <= "spiffe://".length()
                || id.substring("spiffe://".length()).startsWith("/") || id.endsWith("/")
                || id.contains("?") || id.contains("#")) {
            throw new IllegalArgumentException("lock: server SPIFFE ID \"" + id
                    + "\": expected spiffe://trust-domain/path");
        }
        return id;
    }

    /** The URI SANs of a certificate. */
    static List<String> uriSans(X509Certificate c) throws CertificateException {
        List<String> out = new ArrayList<>();
        Collection<List<?>> sans = c.getSubjectAlternativeNames();
        if (sans != null) {
            for (List<?> san : sans) {
                if (san.size() >= 2 && Integer.valueOf(6).equals(san.get(0))) {
                    out.add(String.valueOf(san.get(1)));
                }
            }
        }
        return out;
    }

    /** The edge's leaf must carry exactly one URI SAN, equal to the expected SPIFFE ID. */
    static void authorize(X509Certificate leaf, String serverId) throws CertificateException {
        List<String> ids = uriSans(leaf);
        if (ids.size() != 1) {
            throw new CertificateException("the server's certificate is not an X.509-SVID: "
                    + ids.size() + " URI SANs");
        }
        if (!ids.get(0).equals(serverId)) {
            throw new CertificateException("the server's SPIFFE ID " + ids.get(0)
                    + " is not the expected " + serverId);
        }
    }

    /** The leaf the last handshake presented, or null before the first. */
    X509Certificate presented() {
        return presented;
    }

    /**
     * The channel's TLS context: one for the client's life, since its managers ask the
     * source at each handshake.
     */
    SslContext sslContext() {
        try {
            context = GrpcSslContexts.forClient()
                    .keyManager(keyManager())
                    .trustManager(trustManager())
                    .build();
            return context;
        } catch (SSLException e) {
            throw LockException.client(Reason.UNAUTHENTICATED, "TLS: " + e.getMessage(), e);
        }
    }

    /**
     * Invalidates every TLS session the context cached, so that the next connection makes a
     * full handshake: a resumed session skips the key manager and carries the certificate of
     * the handshake it resumes, so after a rotation the edge would still see the old SVID
     * (found by WorkloadApiSourceTest).
     */
    void forgetSessions() {
        SslContext c = context;
        if (c == null) {
            return;
        }
        SSLSessionContext sessions = c.sessionContext();
        for (Enumeration<byte[]> ids = sessions.getIds(); ids.hasMoreElements(); ) {
            SSLSession s = sessions.getSession(ids.nextElement());
            if (s != null) {
                s.invalidate();
            }
        }
    }

    /** The current material, remembered under the alias the handshake will ask by. */
    private String choose() {
        SvidMaterial m = source.get();
        String alias = ALIAS_PREFIX + m.generation;
        synchronized (pinned) {
            pinned.put(alias, m);
        }
        return alias;
    }

    private SvidMaterial pinned(String alias) {
        SvidMaterial m;
        synchronized (pinned) {
            m = pinned.get(alias);
        }
        return m != null ? m : source.get();
    }

    X509ExtendedKeyManager keyManager() {
        return new X509ExtendedKeyManager() {
            @Override
            public String[] getClientAliases(String keyType, Principal[] issuers) {
                return new String[] {choose()};
            }

            @Override
            public String chooseClientAlias(String[] keyType, Principal[] issuers, Socket socket) {
                return choose();
            }

            @Override
            public String chooseEngineClientAlias(String[] keyType, Principal[] issuers, SSLEngine engine) {
                return choose();
            }

            @Override
            public String[] getServerAliases(String keyType, Principal[] issuers) {
                return null;
            }

            @Override
            public String chooseServerAlias(String keyType, Principal[] issuers, Socket socket) {
                return null;
            }

            @Override
            public X509Certificate[] getCertificateChain(String alias) {
                X509Svid svid = pinned(alias).svid;
                presented = svid.leaf();
                return svid.chain().toArray(new X509Certificate[0]);
            }

            @Override
            public PrivateKey getPrivateKey(String alias) {
                return pinned(alias).svid.privateKey();
            }
        };
    }

    X509ExtendedTrustManager trustManager() {
        return new X509ExtendedTrustManager() {
            private void check(X509Certificate[] chain, String authType) throws CertificateException {
                if (chain == null || chain.length == 0) {
                    throw new CertificateException("the server sent no certificate");
                }
                // The bundle verifies the chain; the SPIFFE ID, not a host name, authorises it
                // (the 2-argument check does no endpoint identification).
                source.get().pkix.checkServerTrusted(chain, authType);
                authorize(chain[0], serverId);
            }

            @Override
            public void checkServerTrusted(X509Certificate[] chain, String authType) throws CertificateException {
                check(chain, authType);
            }

            @Override
            public void checkServerTrusted(X509Certificate[] chain, String authType, Socket socket)
                    throws CertificateException {
                check(chain, authType);
            }

            @Override
            public void checkServerTrusted(X509Certificate[] chain, String authType, SSLEngine engine)
                    throws CertificateException {
                check(chain, authType);
            }

            @Override
            public void checkClientTrusted(X509Certificate[] chain, String authType) throws CertificateException {
                throw new CertificateException("a lock client verifies servers only");
            }

            @Override
            public void checkClientTrusted(X509Certificate[] chain, String authType, Socket socket)
                    throws CertificateException {
                throw new CertificateException("a lock client verifies servers only");
            }

            @Override
            public void checkClientTrusted(X509Certificate[] chain, String authType, SSLEngine engine)
                    throws CertificateException {
                throw new CertificateException("a lock client verifies servers only");
            }

            @Override
            public X509Certificate[] getAcceptedIssuers() {
                return source.get().bundle.toArray(new X509Certificate[0]);
            }
        };
    }
}
