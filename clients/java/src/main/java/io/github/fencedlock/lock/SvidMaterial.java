package io.github.fencedlock.lock;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.CertificateException;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import javax.net.ssl.TrustManagerFactory;
import javax.net.ssl.X509TrustManager;

/**
 * What one TLS handshake uses, whatever the SVID came from (files or the Workload API): the
 * SVID, the trust bundle, and the PKIX trust manager built from the bundle. Immutable; a
 * rotation is a new one with the next generation, so a handshake that picked one keeps the
 * chain and the key that belong together.
 */
final class SvidMaterial {
    /** Numbers the material of one source from 1: a handshake's alias names the one it chose. */
    final long generation;
    final X509Svid svid;
    final List<X509Certificate> bundle;
    final X509TrustManager pkix;

    private SvidMaterial(long generation, X509Svid svid, List<X509Certificate> bundle, X509TrustManager pkix) {
        this.generation = generation;
        this.svid = svid;
        this.bundle = bundle;
        this.pkix = pkix;
    }

    /**
     * Checks and freezes one SVID with its bundle. where names the source in errors.
     *
     * @throws LockException UNAUTHENTICATED: no certificate, no bundle, or a bundle the JDK's
     *     PKIX trust manager cannot take
     */
    static SvidMaterial of(long generation, String spiffeId, X509Certificate[] chain, PrivateKey key,
                           X509Certificate[] bundle, String where) {
        if (chain.length == 0) {
            throw LockException.client(Reason.UNAUTHENTICATED, where + ": no SVID certificate");
        }
        if (bundle.length == 0) {
            throw LockException.client(Reason.UNAUTHENTICATED, where + ": no bundle certificate");
        }
        X509TrustManager tm;
        try {
            KeyStore ks = KeyStore.getInstance(KeyStore.getDefaultType());
            ks.load(null, null);
            for (int i = 0; i < bundle.length; i++) {
                ks.setCertificateEntry("root-" + i, bundle[i]);
            }
            TrustManagerFactory tmf = TrustManagerFactory.getInstance("PKIX");
            tmf.init(ks);
            tm = (X509TrustManager) Arrays.stream(tmf.getTrustManagers())
                    .filter(t -> t instanceof X509TrustManager).findFirst().orElseThrow();
        } catch (GeneralSecurityException | IOException e) {
            throw LockException.client(Reason.UNAUTHENTICATED, where + ": bundle: " + e, e);
        }
        return new SvidMaterial(generation, new X509Svid(spiffeId, List.of(chain), key),
                List.of(bundle), tm);
    }

    /** Certificates in PEM, or DER concatenated (the Workload API's encoding). */
    static X509Certificate[] certificates(InputStream in) throws CertificateException {
        List<X509Certificate> out = new ArrayList<>();
        for (java.security.cert.Certificate c : CertificateFactory.getInstance("X.509").generateCertificates(in)) {
            out.add((X509Certificate) c);
        }
        return out.toArray(new X509Certificate[0]);
    }

    static X509Certificate[] certificates(byte[] data) throws CertificateException {
        return certificates(new ByteArrayInputStream(data));
    }

    /**
     * A PKCS#8 DER private key, EC, RSA or Ed25519 (the key types SPIRE and the dev CA
     * issue), or null when it is none of them.
     */
    static PrivateKey pkcs8(byte[] der) {
        for (String alg : new String[] {"EC", "RSA", "Ed25519"}) {
            try {
                return KeyFactory.getInstance(alg).generatePrivate(new PKCS8EncodedKeySpec(der));
            } catch (GeneralSecurityException e) {
                // try the next algorithm
            }
        }
        return null;
    }
}
