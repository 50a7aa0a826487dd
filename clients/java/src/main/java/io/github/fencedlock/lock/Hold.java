package io.github.fencedlock.lock;

import java.time.Duration;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A granted lock. Pass {@link #token()} to the guarded write and compare it there; check
 * {@link #canStart()} before each unit of work; {@link #close()} (release) when done, best
 * in try-with-resources. Its {@code toString} never shows the token.
 */
public final class Hold implements AutoCloseable {
    final LockClient client;
    final String key;
    final long id;
    final long token;
    final Session session;
    private final AtomicBoolean released = new AtomicBoolean();

    Hold(LockClient client, String key, long id, long token, Session session) {
        this.client = client;
        this.key = key;
        this.id = id;
        this.token = token;
        this.session = session;
    }

    /** The held key. */
    public String key() {
        return key;
    }

    /**
     * The fencing token: epoch &lt;&lt; 48 | the etcd revision of the grant, greater than
     * every earlier grant's token of the key. It is an UNSIGNED 64-bit number (lock.v1's
     * {@code fixed64}) carried in a Java {@code long}: compare tokens with
     * {@link Long#compareUnsigned(long, long)} and print them with
     * {@link Long#toUnsignedString(long)} (a token is negative as a signed long from epoch
     * 32768 on). The resource stores it with each write and accepts a write only when its
     * token is greater than the stored one, in its own conditional write. A capability:
     * never log it.
     */
    public long token() {
        return token;
    }

    /** False from the first failed renewal on: finish in-flight work, start nothing new. */
    public boolean canStart() {
        return session.canStart();
    }

    /** The time left before the local deadline at which the hold is fenced. */
    public Duration remainingTtl() {
        return session.remaining();
    }

    /** Whether the hold was fenced (its onFence ran, or its client was closed): it is dead. */
    public boolean fenced() {
        return session.fenced();
    }

    /**
     * Whether the hold covered every instant from its grant until now: ask when the guarded
     * work ends, before the release. False once the session passed its local deadline, even
     * if the renewal thread has not fenced yet (a process frozen past the TTL).
     */
    public boolean wasContinuous() {
        return session.continuous();
    }

    /**
     * Ends this acquire. Only the outermost hold of a key calls the service; a nested one only
     * counts down. Throws {@link Reason#FENCED} when the hold was fenced before (its work may
     * not have been exclusive). A second release of the same Hold does nothing.
     */
    public void release() {
        if (!released.compareAndSet(false, true)) {
            return;
        }
        client.release(this);
    }

    /** {@link #release()}. */
    @Override
    public void close() {
        release();
    }

    /** The hold without its token. */
    @Override
    public String toString() {
        return "Hold{key: \"" + key + "\", session: " + session.id + "}";
    }
}
