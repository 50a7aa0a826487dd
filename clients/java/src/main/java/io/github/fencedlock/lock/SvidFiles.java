package io.github.fencedlock.lock;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.security.PrivateKey;
import java.security.cert.CertificateException;
import java.security.cert.X509Certificate;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The workload's X.509-SVID from PEM files (written by the SPIRE agent or spiffe-helper):
 * the certificate chain, its PKCS#8 key and the trust bundle that verifies the edge. The
 * files are read again when one changes (a rotation), at the next TLS handshake
 * ({@link SpiffeTls} asks {@link #material()} at each).
 */
final class SvidFiles {
    private static final Pattern KEY_PEM = Pattern.compile(
            "-----BEGIN PRIVATE KEY-----([A-Za-z0-9+/=\\s]+)-----END PRIVATE KEY-----");

    private final Path cert;
    private final Path key;
    private final Path bundle;

    private FileTime[] stamp;
    private SvidMaterial current;

    /** @throws LockException UNAUTHENTICATED when the files cannot be read */
    SvidFiles(Path cert, Path key, Path bundle) {
        this.cert = cert;
        this.key = key;
        this.bundle = bundle;
        refresh();
    }

    /**
     * The material of the files as last read, read again first if one changed. A rotation
     * half-written at the moment of a handshake keeps the last good SVID.
     */
    synchronized SvidMaterial material() {
        try {
            refresh();
        } catch (LockException e) {
            // the last SVID read stays in use
        }
        return current;
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
        if (current != null && Arrays.equals(now, stamp)) {
            return;
        }
        X509Certificate[] c = readCerts(cert, "SVID");
        if (c.length == 0) {
            throw LockException.client(Reason.UNAUTHENTICATED, "SVID " + cert + ": no certificate");
        }
        PrivateKey k = readKey(key);
        X509Certificate[] r = readCerts(bundle, "bundle");
        long generation = current == null ? 1 : current.generation + 1;
        current = SvidMaterial.of(generation, spiffeIdOf(c[0]), c, k, r, "SVID files (" + cert + ", " + bundle + ")");
        stamp = now;
    }

    /** The leaf's single URI SAN, or "" (the files do not name the ID; the edge reads the certificate). */
    private static String spiffeIdOf(X509Certificate leaf) {
        try {
            List<String> ids = SpiffeTls.uriSans(leaf);
            return ids.size() == 1 ? ids.get(0) : "";
        } catch (CertificateException e) {
            return "";
        }
    }

    private static X509Certificate[] readCerts(Path p, String what) {
        try (InputStream in = Files.newInputStream(p)) {
            return SvidMaterial.certificates(in);
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
        PrivateKey k = SvidMaterial.pkcs8(Base64.getMimeDecoder().decode(m.group(1)));
        if (k == null) {
            throw LockException.client(Reason.UNAUTHENTICATED, "SVID key " + p + ": not an EC, RSA or Ed25519 PKCS#8 key");
        }
        return k;
    }
}
