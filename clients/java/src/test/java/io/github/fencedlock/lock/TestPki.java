package io.github.fencedlock.lock;

import java.io.ByteArrayOutputStream;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.KeyPair;
import java.security.KeyPairGenerator;
import java.security.PrivateKey;
import java.security.SecureRandom;
import java.security.Signature;
import java.security.cert.CertificateException;
import java.security.cert.X509Certificate;
import java.security.spec.ECGenParameterSpec;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;

/**
 * A CA in the test JVM that issues X.509-SVIDs (EC P-256, one URI SAN, the extensions
 * SPIRE sets), written out in DER here: the JDK has no public certificate builder, and
 * keytool would cost a JVM per certificate.
 */
final class TestPki {
    private static final SecureRandom RANDOM = new SecureRandom();
    private static final String ECDSA_SHA256 = "1.2.840.10045.4.3.2";

    final X509Certificate ca;
    private final KeyPair caKeys;
    private final byte[] caName;

    /** One SVID: its certificate and PKCS#8 key. */
    static final class Issued {
        final X509Certificate cert;
        final PrivateKey key;

        Issued(X509Certificate cert, PrivateKey key) {
            this.cert = cert;
            this.key = key;
        }
    }

    TestPki(String name) throws GeneralSecurityException {
        caKeys = keys();
        caName = name(name);
        byte[] ext = seq(
                extension("2.5.29.19", true, seq(bool(true))),                     // basicConstraints: CA
                extension("2.5.29.15", true, bitString(new byte[] {0x06}, 1)));   // keyCertSign, cRLSign
        ca = sign(caName, caName, caKeys.getPublic().getEncoded(), Duration.ofHours(1), ext);
    }

    /** An SVID for spiffeId valid for valid (from a minute ago), for client and server auth. */
    Issued svid(String spiffeId, Duration valid) throws GeneralSecurityException {
        KeyPair k = keys();
        byte[] ext = seq(
                extension("2.5.29.19", true, seq()),                                         // not a CA
                extension("2.5.29.15", true, bitString(new byte[] {(byte) 0x80}, 7)),        // digitalSignature
                extension("2.5.29.37", false, seq(oid("1.3.6.1.5.5.7.3.1"), oid("1.3.6.1.5.5.7.3.2"))),
                extension("2.5.29.17", false, seq(tlv(0x86, spiffeId.getBytes(StandardCharsets.US_ASCII)))));
        return new Issued(sign(caName, name("svid"), k.getPublic().getEncoded(), valid, ext), k.getPrivate());
    }

    private static KeyPair keys() throws GeneralSecurityException {
        KeyPairGenerator g = KeyPairGenerator.getInstance("EC");
        g.initialize(new ECGenParameterSpec("secp256r1"));
        return g.generateKeyPair();
    }

    private X509Certificate sign(byte[] issuer, byte[] subject, byte[] spki, Duration valid, byte[] extensions)
            throws GeneralSecurityException {
        Instant now = Instant.now();
        byte[] alg = seq(oid(ECDSA_SHA256));
        byte[] tbs = seq(
                tlv(0xA0, integer(BigInteger.valueOf(2))),                                   // v3
                integer(new BigInteger(63, RANDOM).add(BigInteger.ONE)),
                alg,
                issuer,
                seq(time(now.minusSeconds(60)), time(now.plus(valid))),
                subject,
                spki,
                tlv(0xA3, extensions));
        Signature s = Signature.getInstance("SHA256withECDSA");
        s.initSign(caKeys.getPrivate());
        s.update(tbs);
        byte[] der = seq(tbs, alg, bitString(s.sign(), 0));
        try {
            return SvidMaterial.certificates(der)[0];
        } catch (CertificateException e) {
            throw new IllegalStateException("TestPki wrote a certificate the JDK cannot read", e);
        }
    }

    /** DER of certificates concatenated, as the Workload API carries them. */
    static byte[] der(X509Certificate... certs) throws CertificateException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        for (X509Certificate c : certs) {
            out.writeBytes(c.getEncoded());
        }
        return out.toByteArray();
    }

    // ---- DER ----

    private static byte[] name(String cn) {
        return seq(tlv(0x31, seq(oid("2.5.4.3"), tlv(0x0C, cn.getBytes(StandardCharsets.UTF_8)))));
    }

    private static byte[] extension(String id, boolean critical, byte[] value) {
        return critical ? seq(oid(id), bool(true), tlv(0x04, value)) : seq(oid(id), tlv(0x04, value));
    }

    private static byte[] time(Instant t) {
        String s = DateTimeFormatter.ofPattern("yyMMddHHmmss'Z'").withZone(ZoneOffset.UTC).format(t);
        return tlv(0x17, s.getBytes(StandardCharsets.US_ASCII));
    }

    private static byte[] bool(boolean b) {
        return tlv(0x01, new byte[] {(byte) (b ? 0xFF : 0)});
    }

    private static byte[] integer(BigInteger i) {
        return tlv(0x02, i.toByteArray());
    }

    private static byte[] bitString(byte[] bits, int unused) {
        byte[] v = new byte[bits.length + 1];
        v[0] = (byte) unused;
        System.arraycopy(bits, 0, v, 1, bits.length);
        return tlv(0x03, v);
    }

    private static byte[] oid(String dotted) {
        String[] arcs = dotted.split("\\.");
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.write(Integer.parseInt(arcs[0]) * 40 + Integer.parseInt(arcs[1]));
        for (int i = 2; i < arcs.length; i++) {
            long v = Long.parseLong(arcs[i]);
            int n = 0;
            byte[] b = new byte[10];
            do {
                b[n++] = (byte) (v & 0x7F);
                v >>>= 7;
            } while (v != 0);
            for (int j = n - 1; j >= 0; j--) {
                out.write(b[j] | (j > 0 ? 0x80 : 0));
            }
        }
        return tlv(0x06, out.toByteArray());
    }

    private static byte[] seq(byte[]... parts) {
        return tlv(0x30, parts);
    }

    private static byte[] tlv(int tag, byte[]... parts) {
        ByteArrayOutputStream body = new ByteArrayOutputStream();
        for (byte[] p : parts) {
            body.writeBytes(p);
        }
        int len = body.size();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.write(tag);
        if (len < 0x80) {
            out.write(len);
        } else {
            int bytes = len > 0xFFFF ? 3 : len > 0xFF ? 2 : 1;
            out.write(0x80 | bytes);
            for (int i = bytes - 1; i >= 0; i--) {
                out.write(len >>> (8 * i));
            }
        }
        out.writeBytes(body.toByteArray());
        return out.toByteArray();
    }
}
