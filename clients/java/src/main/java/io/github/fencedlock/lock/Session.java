package io.github.fencedlock.lock;

import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import java.util.logging.Level;
import java.util.logging.Logger;
import lock.v1.LockGrpc;
import lock.v1.LockOuterClass.KeepAliveRequest;
import lock.v1.LockOuterClass.KeepAliveResponse;

/**
 * One lease of a client per (TTL, cluster), renewed by one KeepAlive stream however many
 * holds it carries (ADR-10). Its thread sends a keepalive every TTL/3, records the SEND time
 * of each success, and fences every hold of the session at the deadline (send time of the
 * last success + TTL − 1 s), as the Go and Rust clients do.
 */
final class Session {
    private static final Logger LOG = Logger.getLogger(Session.class.getName());

    final long id;
    final Duration ttl;

    private final Object mu = new Object();
    private final Liveness live;
    private final Map<Long, Runnable> fences = new LinkedHashMap<>();
    private final CountDownLatch stop = new CountDownLatch(1);
    private volatile KaStream stream;
    private Thread thread;

    Session(long id, Duration ttl, long openedAt) {
        this.id = id;
        this.ttl = ttl;
        this.live = new Liveness(ttl, openedAt);
    }

    /** The cluster tag in a session id (bits 55..62; lock_config::shards::tag_of). */
    static int tagOf(long sessionId) {
        return (int) ((sessionId >> 55) & 0xff);
    }

    boolean canStart() {
        synchronized (mu) {
            return live.canStart(System.nanoTime());
        }
    }

    Duration remaining() {
        synchronized (mu) {
            return live.remaining(System.nanoTime());
        }
    }

    boolean continuous() {
        synchronized (mu) {
            return live.continuous(System.nanoTime());
        }
    }

    boolean fenced() {
        synchronized (mu) {
            return live.fenced();
        }
    }

    void attach(long hold, Runnable onFence) {
        synchronized (mu) {
            fences.put(hold, onFence);
        }
    }

    void detach(long hold) {
        synchronized (mu) {
            fences.remove(hold);
        }
    }

    /** Ends the session by its owner: dead from now on, and no onFence runs. Stops the renewal thread. */
    void close() {
        synchronized (mu) {
            live.expire();
            fences.clear();
        }
        stop.countDown();
        KaStream s = stream;
        if (s != null) {
            s.close();
        }
    }

    /** Runs every hold's onFence once, outside the lock, if due says so. */
    private void fenceAll(Predicate<Liveness> due) {
        List<Runnable> callbacks = new ArrayList<>();
        synchronized (mu) {
            if (due.test(live)) {
                callbacks.addAll(fences.values());
                fences.clear();
            }
        }
        for (Runnable f : callbacks) {
            try {
                f.run();
            } catch (RuntimeException e) {
                LOG.log(Level.WARNING, "lock: an onFence callback threw", e);
            }
        }
    }

    /** Starts the renewal thread (a daemon: it never keeps the JVM alive). */
    void start(LockGrpc.LockStub rpc) {
        thread = new Thread(() -> keepAlive(rpc), "lock-keepalive-" + id);
        thread.setDaemon(true);
        thread.start();
    }

    /** Renews the session until it is fenced or closed. */
    private void keepAlive(LockGrpc.LockStub rpc) {
        long period = ttl.toNanos() / 3;
        long next = System.nanoTime() + period;
        try {
            while (true) {
                long deadline;
                synchronized (mu) {
                    deadline = live.deadline();
                }
                long wake = deadline - next < 0 ? deadline : next;
                long sleep = wake - System.nanoTime();
                if (sleep > 0 && stop.await(sleep, TimeUnit.NANOSECONDS)) {
                    return;
                }
                if (stop.getCount() == 0) {
                    return;
                }
                long now = System.nanoTime();
                fenceAll(l -> l.fenceDue(now));
                if (fenced()) {
                    return;
                }
                if (now - next < 0) {
                    continue;
                }
                long sent = System.nanoTime();
                long wait = Math.min(deadline - sent, period);
                LockException err = renew(rpc, wait);
                if (err == null) {
                    synchronized (mu) {
                        live.renewed(sent);
                    }
                    next = sent + period;
                } else if (err.reason() == Reason.SESSION_EXPIRED) {
                    fenceAll(Liveness::expire);
                    return;
                } else {
                    synchronized (mu) {
                        live.failed();
                    }
                    KaStream s = stream;
                    if (s != null) {
                        s.close();
                        stream = null;
                    }
                    // Retry sooner than a full period while the deadline allows.
                    next = System.nanoTime() + period / 3;
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            KaStream s = stream;
            if (s != null) {
                s.close();
                stream = null;
            }
        }
    }

    /**
     * One keepalive round trip within wait nanoseconds, on the session's stream (opened if
     * needed). A stream the server ended cleanly (an arbiter draining) is reopened at once,
     * through the edge, on another arbiter: one retry within the same wait. Null on success.
     */
    private LockException renew(LockGrpc.LockStub rpc, long wait) throws InterruptedException {
        if (wait <= 0) {
            return LockException.client(Reason.UNAVAILABLE, "keepalive: no time left before the deadline");
        }
        long until = System.nanoTime() + wait;
        for (boolean retry : new boolean[] {true, false}) {
            KaStream st = stream;
            if (st == null) {
                try {
                    st = KaStream.open(rpc);
                } catch (RuntimeException e) {
                    return LockException.from(e);
                }
                stream = st;
            }
            try {
                st.send(KeepAliveRequest.newBuilder().setSessionId(id).build());
            } catch (RuntimeException e) {
                // The real error, if any, comes with the next answer.
            }
            Answer<KeepAliveResponse> a = st.answers.poll(Math.max(until - System.nanoTime(), 0), TimeUnit.NANOSECONDS);
            if (stop.getCount() == 0) {
                return LockException.client(Reason.CLOSED, "session closed");
            }
            if (a == null) {
                return LockException.client(Reason.UNAVAILABLE, "keepalive timed out");
            }
            if (a.value != null) {
                return a.value.getTtlSeconds() > 0 ? null
                        : LockException.client(Reason.SESSION_EXPIRED, "the session's lease is gone");
            }
            st.close();
            stream = null;
            if (a.error == null && retry) {
                continue;
            }
            if (a.error == null) {
                return LockException.client(Reason.UNAVAILABLE, "keepalive stream ended");
            }
            return LockException.from(a.error);
        }
        return LockException.client(Reason.UNAVAILABLE, "keepalive stream ended");
    }

    /** One answer of a stream: a message, an error, or the end (both null). */
    static final class Answer<T> {
        final T value;
        final Throwable error;

        Answer(T value, Throwable error) {
            this.value = value;
            this.error = error;
        }
    }

    /** One KeepAlive call; its answers queue up so a renewal can wait for one with a timeout. */
    static final class KaStream {
        final BlockingQueue<Answer<KeepAliveResponse>> answers = new LinkedBlockingQueue<>();
        private ClientCallStreamObserver<KeepAliveRequest> requests;

        static KaStream open(LockGrpc.LockStub rpc) {
            KaStream k = new KaStream();
            k.requests = (ClientCallStreamObserver<KeepAliveRequest>) rpc.keepAlive(new StreamObserver<>() {
                @Override
                public void onNext(KeepAliveResponse r) {
                    k.answers.add(new Answer<>(r, null));
                }

                @Override
                public void onError(Throwable t) {
                    k.answers.add(new Answer<>(null, t));
                }

                @Override
                public void onCompleted() {
                    k.answers.add(new Answer<>(null, null));
                }
            });
            return k;
        }

        synchronized void send(KeepAliveRequest r) {
            requests.onNext(r);
        }

        synchronized void close() {
            try {
                requests.cancel("closed by the client", null);
            } catch (RuntimeException e) {
                // already ended
            }
        }
    }
}
