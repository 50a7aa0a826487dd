package io.github.fencedlock.lock;

import java.security.SecureRandom;
import java.util.HexFormat;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The {@code lock-instance} a client sends with OpenSession: the same rule as the Go client
 * (clients/go/instance.go), {@code <prefix>:<pid>:<n>}. The prefix is {@code LOCK_INSTANCE}
 * when the whole instance with it is valid, else a random {@code p-<16 hex>} drawn once per
 * process; n numbers the process's clients from 1. Each {@link LockClient} is its own
 * contender: two clients of one JVM (another n), or JVMs sharing one {@code LOCK_INSTANCE}
 * (another pid), queue behind each other instead of being told LEAKED_HOLD, while a
 * restarted container whose JVM is pid 1 again gets its previous life's instance for its
 * first client and is told LEAKED_HOLD on meeting its own old hold.
 */
public final class Instance {
    private Instance() {}

    /** The environment variable the instance prefix is read from (set it to the pod UID). */
    public static final String ENV = "LOCK_INSTANCE";
    /** The longest {@code lock-instance} value the service accepts. */
    public static final int MAX_LEN = 253;

    private static final SecureRandom RANDOM = new SecureRandom();
    /** Numbers this process's clients that name their instance by the rule. */
    private static final Sequence CLIENTS = new Sequence();

    /** This process's fallback prefix, drawn on first use. */
    private static final class Fallback {
        static final String PREFIX = "p-" + randomSuffix();
    }

    /** A counter whose first {@link #next()} is 1. */
    static final class Sequence {
        private final AtomicLong n = new AtomicLong();

        long next() {
            return n.incrementAndGet();
        }
    }

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
     * A client's instance from its parts, {@code <prefix>:<pid>:<n>}: prefix is env when the
     * whole result with it is {@link #valid}, else fallback.
     */
    public static String name(String env, long pid, long n, String fallback) {
        String tail = ":" + pid + ":" + n;
        if (env != null && !env.isEmpty() && valid(env + tail)) {
            return env + tail;
        }
        return fallback + tail;
    }

    /** 64 random bits as 16 lower-case hex digits. */
    static String randomSuffix() {
        byte[] b = new byte[8];
        RANDOM.nextBytes(b);
        return HexFormat.of().formatHex(b);
    }

    /** This process's prefix when {@code LOCK_INSTANCE} is unset or does not fit: {@code p-<16 hex>}. */
    public static String fallbackPrefix() {
        return Fallback.PREFIX;
    }

    /** The number of this process's next client: 1, 2, ... */
    static long nextClient() {
        return CLIENTS.next();
    }

    /**
     * A new client's instance: name($LOCK_INSTANCE, this process's pid, the next client
     * number, {@link #fallbackPrefix()}).
     */
    public static String generate() {
        return name(System.getenv(ENV), ProcessHandle.current().pid(), nextClient(), fallbackPrefix());
    }
}
