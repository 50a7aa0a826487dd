package io.github.fencedlock.lock;

import java.time.Duration;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A held permit of a semaphore ({@link LockClient#acquirePermit}): one of the N permits of a
 * key of a {@code permits: N} class. Up to N sessions hold the key at once, each on its own
 * permit (numbered 0..N-1) with its own token. A resource fences per permit: it keeps the last
 * token seen for each (key, permit) and accepts a write only under a greater one
 * ({@code UPDATE ... SET fence = $token WHERE key = $k AND permit = $p AND fence < $token}),
 * so a paused holder's late write is refused once its permit has been given again.
 *
 * <p>Renewed with its session and fenced with it, as any hold. A client's second acquire of
 * a key whose permit it holds nests on it (the same permit and token); {@link #close()}
 * (release) of the last one releases the permit (mode PERMIT). Its {@code toString} never
 * shows the token.
 */
public final class Permit implements AutoCloseable {
    private final LockClient client;
    final String key;
    final long id;
    private final int permit;
    final long token;
    final Session session;
    private final AtomicBoolean released = new AtomicBoolean();

    Permit(LockClient client, String key, long id, int permit, long token, Session session) {
        this.client = client;
        this.key = key;
        this.id = id;
        this.permit = permit;
        this.token = token;
        this.session = session;
    }

    /** The semaphore's key. */
    public String key() {
        return key;
    }

    /** Which of the key's N permits this is (0..N-1): the resource fences per permit. */
    public int permit() {
        return permit;
    }

    /**
     * This permit grant's token, unsigned as {@link Hold#token()}: strictly above every earlier
     * grant of the same permit, and unlike every other grant of the key. A capability: never
     * log it.
     */
    public long token() {
        return token;
    }

    /** False from the first failed renewal on: finish in-flight work, start nothing new. */
    public boolean canStart() {
        return session.canStart();
    }

    /** The time left before the local deadline at which the permit is fenced. */
    public Duration remainingTtl() {
        return session.remaining();
    }

    /** Whether the permit was fenced (its onFence ran, or its client was closed): it is dead. */
    public boolean fenced() {
        return session.fenced();
    }

    /** Whether the permit was held at every instant from its grant until now (as {@link Hold#wasContinuous()}). */
    public boolean wasContinuous() {
        return session.continuous();
    }

    /**
     * Ends this acquire. Only the outermost Permit of a key calls the service (a Release with
     * mode PERMIT); a nested one only counts down. Throws {@link Reason#FENCED} when the permit
     * was fenced before (its work may have overlapped the permit's next holder). A second
     * release of the same Permit does nothing.
     */
    public void release() {
        if (!released.compareAndSet(false, true)) {
            return;
        }
        client.releasePermit(this);
    }

    /** {@link #release()}. */
    @Override
    public void close() {
        release();
    }

    /** The permit without its token. */
    @Override
    public String toString() {
        return "Permit{key: \"" + key + "\", permit: " + permit + ", session: " + session.id + "}";
    }
}
