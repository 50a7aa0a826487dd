package io.github.fencedlock.lock;

import java.security.PrivateKey;
import java.security.cert.X509Certificate;
import java.util.List;

/**
 * One X.509-SVID as a snapshot: its SPIFFE ID, its certificate chain (leaf first, then any
 * intermediates) and its private key. A rotation is a new {@code X509Svid}; this one never
 * changes. {@link #toString()} names the ID and the leaf's serial and expiry, never the key.
 */
public final class X509Svid {
    private final String spiffeId;
    private final List<X509Certificate> chain;
    private final PrivateKey privateKey;

    X509Svid(String spiffeId, List<X509Certificate> chain, PrivateKey privateKey) {
        this.spiffeId = spiffeId;
        this.chain = List.copyOf(chain);
        this.privateKey = privateKey;
    }

    /** The SPIFFE ID ({@code spiffe://trust-domain/path}) the SVID is for. */
    public String spiffeId() {
        return spiffeId;
    }

    /** The certificate chain, leaf first; unmodifiable. */
    public List<X509Certificate> chain() {
        return chain;
    }

    /** The leaf certificate: the SVID itself. */
    public X509Certificate leaf() {
        return chain.get(0);
    }

    /** The leaf's private key. */
    public PrivateKey privateKey() {
        return privateKey;
    }

    @Override
    public String toString() {
        return "X509Svid{" + spiffeId + ", serial " + leaf().getSerialNumber().toString(16)
                + ", not after " + leaf().getNotAfter().toInstant() + "}";
    }
}
