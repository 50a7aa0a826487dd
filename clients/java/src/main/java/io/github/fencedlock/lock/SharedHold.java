package io.github.fencedlock.lock;

import java.time.Duration;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A shared hold ({@link LockClient#acquireShared}): one of many holders of a key of a
 * {@code shared: true} class. Its token is its own grant's: above the last exclusive grant
 * of the key before it, below the next one. A resource that records its last writer's token
 * serves a read only under a token at least that one, so a reader paused past its session
 * while a writer came and went is refused. {@link #close()} releases it (mode SHARED). Its
 * {@code toString} never shows the token.
 */
public final class SharedHold implements AutoCloseable {
    private final LockClient client;
    final String key;
    final long id;
    final long token;
    final Session session;
    /** The hold time of the grant, and the id of the session's fence callback that records it. */
    final Metrics.HoldTimer timer;
    final long hook;
    private final AtomicBoolean released = new AtomicBoolean();

    SharedHold(LockClient client, String key, long id, long token, Session session,
            Metrics.HoldTimer timer, long hook) {
        this.client = client;
        this.key = key;
        this.id = id;
        this.token = token;
        this.session = session;
        this.timer = timer;
        this.hook = hook;
    }

    /** The held key. */
    public String key() {
        return key;
    }

    /** This shared hold's token, unsigned as {@link Hold#token()}. A capability: never log it. */
    public long token() {
        return token;
    }

    /** False from the first failed renewal on. */
    public boolean canStart() {
        return session.canStart();
    }

    /** The time left before the local deadline at which the hold is fenced. */
    public Duration remainingTtl() {
        return session.remaining();
    }

    /** Whether the hold was fenced. */
    public boolean fenced() {
        return session.fenced();
    }

    /** Whether the hold covered every instant from its grant until now. */
    public boolean wasContinuous() {
        return session.continuous();
    }

    /**
     * Ends the shared hold (a Release with mode SHARED). Throws {@link Reason#FENCED} when it
     * was fenced before. A second release does nothing.
     */
    public void release() {
        if (!released.compareAndSet(false, true)) {
            return;
        }
        client.releaseShared(this);
    }

    /** {@link #release()}. */
    @Override
    public void close() {
        release();
    }

    /** The hold without its token. */
    @Override
    public String toString() {
        return "SharedHold{key: \"" + key + "\", session: " + session.id + "}";
    }
}
