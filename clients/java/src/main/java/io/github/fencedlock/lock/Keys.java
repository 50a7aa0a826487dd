package io.github.fencedlock.lock;

import io.grpc.Metadata;
import java.nio.charset.StandardCharsets;

/** The request metadata the client sends (lock.proto, "Metadata"). */
public final class Keys {
    private Keys() {}

    /** A keyed call's key, percent-encoded (the edge's fast path). */
    public static final Metadata.Key<String> KEY_HEADER = Metadata.Key.of("lock-key", Metadata.ASCII_STRING_MARSHALLER);
    /** The client's instance, sent with OpenSession. */
    public static final Metadata.Key<String> INSTANCE_HEADER = Metadata.Key.of("lock-instance", Metadata.ASCII_STRING_MARSHALLER);

    private static final char[] HEX = "0123456789ABCDEF".toCharArray();

    /**
     * The key as the value of the {@code lock-key} metadata: every printable ASCII byte but
     * '%' as is, every other byte of the UTF-8 key as %XX (upper-case hex): the same spelling
     * as the Rust, Go, Python and Node clients (lock_config::edge_headers).
     */
    public static String encodeKey(String key) {
        byte[] bytes = key.getBytes(StandardCharsets.UTF_8);
        StringBuilder b = new StringBuilder(bytes.length);
        for (byte x : bytes) {
            int c = x & 0xff;
            if (c >= 0x21 && c <= 0x7e && c != '%') {
                b.append((char) c);
            } else {
                b.append('%').append(HEX[c >> 4]).append(HEX[c & 0xf]);
            }
        }
        return b.toString();
    }

    /** Metadata carrying key as {@code lock-key}. */
    static Metadata keyed(String key) {
        Metadata md = new Metadata();
        md.put(KEY_HEADER, encodeKey(key));
        return md;
    }
}
