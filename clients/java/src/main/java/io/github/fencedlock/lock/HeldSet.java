package io.github.fencedlock.lock;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A set of keys {@link LockClient#acquireAll} granted together, in one transaction: every
 * key's token is {@link #token()}, write to each key's resource with it. Check
 * {@link #canStart()} before each unit of work, as for a Hold; {@link #close()} (release)
 * ends every key in one ReleaseAll. Its {@code toString} never shows the token.
 */
public final class HeldSet implements AutoCloseable {
    private final LockClient client;
    private final List<String> keys;
    final long id;
    private final long token;
    final Session session;
    /** The hold time of the grant, and the id of the session's fence callback that records it. */
    final Metrics.HoldTimer timer;
    final long hook;
    private final AtomicBoolean released = new AtomicBoolean();

    HeldSet(LockClient client, List<String> keys, long id, long token, Session session,
            Metrics.HoldTimer timer, long hook) {
        this.client = client;
        this.keys = List.copyOf(keys);
        this.id = id;
        this.token = token;
        this.session = session;
        this.timer = timer;
        this.hook = hook;
    }

    /** The keys held, sorted (as the service answered them). */
    public List<String> keys() {
        return keys;
    }

    /** The fencing token of every key of the set, unsigned as {@link Hold#token()}. A capability: never log it. */
    public long token() {
        return token;
    }

    /** False from the first failed renewal on: finish in-flight work, start nothing new. */
    public boolean canStart() {
        return session.canStart();
    }

    /** The time left before the local deadline at which the set is fenced. */
    public Duration remainingTtl() {
        return session.remaining();
    }

    /** Whether the holds were fenced: they are dead. */
    public boolean fenced() {
        return session.fenced();
    }

    /** Whether the holds covered every instant from the grant until now. */
    public boolean wasContinuous() {
        return session.continuous();
    }

    /**
     * Ends every key of the set still of this grant, in one transaction (ReleaseAll). Throws
     * {@link Reason#FENCED} when the set was fenced before. A second release does nothing.
     */
    public void release() {
        if (!released.compareAndSet(false, true)) {
            return;
        }
        client.releaseAll(this);
    }

    /** {@link #release()}. */
    @Override
    public void close() {
        release();
    }

    /** The set without its token. */
    @Override
    public String toString() {
        return "HeldSet{keys: " + keys + ", session: " + session.id + "}";
    }
}
