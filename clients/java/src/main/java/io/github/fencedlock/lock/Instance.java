package io.github.fencedlock.lock;

import java.security.SecureRandom;
import java.util.HexFormat;

/**
 * The {@code lock-instance} a client sends with OpenSession: the same rule as the Go client
 * (clients/go/instance.go). Each {@link LockClient} is its own contender: two clients of one
 * JVM, or JVMs sharing one {@code LOCK_INSTANCE} (one pod), queue behind each other instead
 * of being told LEAKED_HOLD.
 */
public final class Instance {
    private Instance() {}

    /** The environment variable the instance prefix is read from (set it to the pod UID). */
    public static final String ENV = "LOCK_INSTANCE";
    /** The longest {@code lock-instance} value the service accepts. */
    public static final int MAX_LEN = 253;
    /** The prefix when {@code LOCK_INSTANCE} is unset or not a valid instance. */
    public static final String DEFAULT_PREFIX = "java";

    private static final SecureRandom RANDOM = new SecureRandom();

    /**
     * Whether s is an instance the service accepts: 1 to {@link #MAX_LEN} characters of
     * A-Z a-z 0-9 . _ : - (lock_config::instance::parse_instance). '/' is refused.
     */
    public static boolean valid(String s) {
        if (s == null || s.isEmpty() || s.length() > MAX_LEN) {
            return false;
        }
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            boolean ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
                    || c == '.' || c == '_' || c == ':' || c == '-';
            if (!ok) {
                return false;
            }
        }
        return true;
    }

    /**
     * A client's instance from its parts: prefix (or {@link #DEFAULT_PREFIX} when it is not a
     * valid instance), the process id and a per-client random suffix, joined with ':'. A
     * prefix too long to fit is cut so that the result stays within {@link #MAX_LEN}.
     */
    public static String name(String prefix, long pid, String suffix) {
        if (!valid(prefix)) {
            prefix = DEFAULT_PREFIX;
        }
        String tail = ":" + pid + ":" + suffix;
        if (prefix.length() + tail.length() > MAX_LEN) {
            prefix = prefix.substring(0, MAX_LEN - tail.length());
        }
        return prefix + tail;
    }

    /** 64 random bits as 16 lower-case hex digits. */
    static String randomSuffix() {
        byte[] b = new byte[8];
        RANDOM.nextBytes(b);
        return HexFormat.of().formatHex(b);
    }

    /** A new client's instance: name($LOCK_INSTANCE, this process's pid, 16 random hex). */
    public static String generate() {
        return name(System.getenv(ENV), ProcessHandle.current().pid(), randomSuffix());
    }
}
