package io.github.fencedlock.lock;

import java.io.IOException;
import java.io.InputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.Principal;
import java.security.PrivateKey;
import java.security.cert.CertificateException;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collection;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.TrustManagerFactory;
import javax.net.ssl.X509ExtendedKeyManager;
import javax.net.ssl.X509ExtendedTrustManager;
import javax.net.ssl.X509TrustManager;

/**
 * The workload's X.509-SVID from PEM files (written by the SPIRE agent or spiffe-helper):
 * the certificate chain, its PKCS#8 key and the trust bundle that verifies the edge. The
 * files are read again when one changes (a rotation), at the next TLS handshake. Gives the
 * TLS key manager (presents the SVID) and the trust manager: the bundle verifies the edge's
 * chain, and the edge is authorised by its exact SPIFFE ID (the leaf's single URI SAN), not
 * by a host name.
 */
final class SvidFiles {
    private static final String ALIAS = "svid";
    private static final Pattern KEY_PEM = Pattern.compile(
            "-----BEGIN PRIVATE KEY-----([A-Za-z0-9+/=\\s]+)-----END PRIVATE KEY-----");

    private final Path cert;
    private final Path key;
    private final Path bundle;
    private final String serverId;

    private FileTime[] stamp;
    private X509Certificate[] chain;
    private PrivateKey privateKey;
    private X509Certificate[] roots;
    private X509TrustManager pkix;

    SvidFiles(Path cert, Path key, Path bundle, String serverId) {
        this.cert = cert;
        this.key = key;
        this.bundle = bundle;
        this.serverId = checkSpiffeId(serverId);
        refresh();
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

    /** Reads the files again if one changed since the last read. */
    synchronized void refresh() {
        FileTime[] now = new FileTime[3];
        Path[] paths = {cert, key, bundle};
        try {
            for (int i = 0; i < 3; i++) {
                now[i] = Files.getLastModifiedTime(paths[i]);
            }
        } catch (IOException e) {
            throw LockException.client(Reason.UNAUTHENTICATED, "SVID files: " + e, e);
        }
        if (chain != null && Arrays.equals(now, stamp)) {
            return;
        }
        X509Certificate[] c = readCerts(cert, "SVID");
        if (c.length == 0) {
            throw LockException.client(Reason.UNAUTHENTICATED, "SVID " + cert + ": no certificate");
        }
        PrivateKey k = readKey(key);
        X509Certificate[] r = readCerts(bundle, "bundle");
        if (r.length == 0) {
            throw LockException.client(Reason.UNAUTHENTICATED, "bundle " + bundle + ": no certificate");
        }
        X509TrustManager tm;
        try {
            KeyStore ks = KeyStore.getInstance(KeyStore.getDefaultType());
            ks.load(null, null);
            for (int i = 0; i < r.length; i++) {
                ks.setCertificateEntry("root-" + i, r[i]);
            }
            TrustManagerFactory tmf = TrustManagerFactory.getInstance("PKIX");
            tmf.init(ks);
            tm = (X509TrustManager) Arrays.stream(tmf.getTrustManagers())
                    .filter(t -> t instanceof X509TrustManager).findFirst().orElseThrow();
        } catch (GeneralSecurityException | IOException e) {
            throw LockException.client(Reason.UNAUTHENTICATED, "bundle " + bundle + ": " + e, e);
        }
        chain = c;
        privateKey = k;
        roots = r;
        pkix = tm;
        stamp = now;
    }

    private static X509Certificate[] readCerts(Path p, String what) {
        try (InputStream in = Files.newInputStream(p)) {
            Collection<? extends java.security.cert.Certificate> certs =
                    CertificateFactory.getInstance("X.509").generateCertificates(in);
            List<X509Certificate> out = new ArrayList<>();
            for (java.security.cert.Certificate c : certs) {
                out.add((X509Certificate) c);
            }
            return out.toArray(new X509Certificate[0]);
        } catch (IOException | CertificateException e) {
            throw LockException.client(Reason.UNAUTHENTICATED, what + " " + p + ": " + e, e);
        }
    }

    private static PrivateKey readKey(Path p) {
        String pem;
        try {
            pem = Files.readString(p, StandardCharsets.US_ASCII);
        } catch (IOException e) {
            throw LockException.client(Reason.UNAUTHENTICATED, "SVID key " + p + ": " + e, e);
        }
        Matcher m = KEY_PEM.matcher(pem);
        if (!m.find()) {
            throw LockException.client(Reason.UNAUTHENTICATED, "SVID key " + p + ": expected a PKCS#8 PEM (BEGIN PRIVATE KEY)");
        }
        byte[] der = Base64.getMimeDecoder().decode(m.group(1));
        for (String alg : new String[] {"EC", "RSA", "Ed25519"}) {
            try {
                return KeyFactory.getInstance(alg).generatePrivate(new PKCS8EncodedKeySpec(der));
            } catch (GeneralSecurityException e) {
                // try the next algorithm
            }
        }
        throw LockException.client(Reason.UNAUTHENTICATED, "SVID key " + p + ": not an EC, RSA or Ed25519 PKCS#8 key");
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

    X509ExtendedKeyManager keyManager() {
        return new X509ExtendedKeyManager() {
            @Override
            public String[] getClientAliases(String keyType, Principal[] issuers) {
                return new String[] {ALIAS};
            }

            @Override
            public String chooseClientAlias(String[] keyType, Principal[] issuers, Socket socket) {
                return ALIAS;
            }

            @Override
            public String chooseEngineClientAlias(String[] keyType, Principal[] issuers, SSLEngine engine) {
                return ALIAS;
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
                synchronized (SvidFiles.this) {
                    tryRefresh();
                    return chain.clone();
                }
            }

            @Override
            public PrivateKey getPrivateKey(String alias) {
                synchronized (SvidFiles.this) {
                    tryRefresh();
                    return privateKey;
                }
            }
        };
    }

    /** A rotation half-written at the moment of a handshake keeps the last good SVID. */
    private void tryRefresh() {
        try {
            refresh();
        } catch (LockException e) {
            // the last SVID read stays in use
        }
    }

    X509ExtendedTrustManager trustManager() {
        return new X509ExtendedTrustManager() {
            private void check(X509Certificate[] chain, String authType) throws CertificateException {
                if (chain == null || chain.length == 0) {
                    throw new CertificateException("the server sent no certificate");
                }
                X509TrustManager tm;
                synchronized (SvidFiles.this) {
                    tryRefresh();
                    tm = pkix;
                }
                // The bundle verifies the chain; the SPIFFE ID, not a host name, authorises it
                // (the 2-argument check does no endpoint identification).
                tm.checkServerTrusted(chain, authType);
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
                synchronized (SvidFiles.this) {
                    return roots.clone();
                }
            }
        };
    }
}
