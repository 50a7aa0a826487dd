package io.github.fencedlock.lock;

import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.MetadataUtils;
import io.grpc.stub.StreamObserver;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import lock.v1.LockGrpc;
import lock.v1.LockOuterClass.HoldRequest;
import lock.v1.LockOuterClass.HoldResponse;

/**
 * A hold as one Hold stream (issue 33): the acquire and, later, its release on one HTTP/2
 * stream, one request at the edge instead of two. Opened with the key as {@code lock-key}
 * metadata. Only a transport: the hold lives on the session, so a release the stream cannot
 * carry goes as the unary call.
 */
final class HoldLink {
    private final BlockingQueue<Session.Answer<HoldResponse>> answers = new LinkedBlockingQueue<>();
    private final AtomicBoolean closed = new AtomicBoolean();
    private ClientCallStreamObserver<HoldRequest> requests;

    /** Opens a Hold stream for key; it lives until {@link #close()}, not the caller's deadline. */
    static HoldLink open(LockGrpc.LockStub rpc, String key) {
        HoldLink l = new HoldLink();
        LockGrpc.LockStub keyed = rpc.withInterceptors(MetadataUtils.newAttachHeadersInterceptor(Keys.keyed(key)));
        try {
            l.requests = (ClientCallStreamObserver<HoldRequest>) keyed.hold(new StreamObserver<>() {
                @Override
                public void onNext(HoldResponse r) {
                    l.answers.add(new Session.Answer<>(r, null));
                }

                @Override
                public void onError(Throwable t) {
                    l.answers.add(new Session.Answer<>(null, t));
                }

                @Override
                public void onCompleted() {
                    l.answers.add(new Session.Answer<>(null, null));
                }
            });
        } catch (RuntimeException e) {
            throw LockException.from(e);
        }
        return l;
    }

    /**
     * Sends msg and waits, until deadline (a nanoTime) at the latest, for its one answer. A
     * stream that ended without one, or broke, is UNAVAILABLE; a refusal its LockException.
     */
    HoldResponse ask(HoldRequest msg, long deadline) throws InterruptedException {
        synchronized (this) {
            try {
                requests.onNext(msg);
            } catch (RuntimeException e) {
                // The real error, if any, comes as the answer.
            }
        }
        Session.Answer<HoldResponse> a = answers.poll(Math.max(deadline - System.nanoTime(), 0), TimeUnit.NANOSECONDS);
        if (a == null) {
            throw LockException.client(Reason.UNAVAILABLE, "the hold stream did not answer in time");
        }
        if (a.value != null) {
            return a.value;
        }
        if (a.error == null) {
            throw LockException.client(Reason.UNAVAILABLE, "the hold stream ended");
        }
        throw LockException.from(a.error);
    }

    /** Ends the stream; true the first time. */
    boolean close() {
        if (!closed.compareAndSet(false, true)) {
            return false;
        }
        synchronized (this) {
            try {
                requests.onCompleted();
            } catch (RuntimeException e) {
                // already ended
            }
            try {
                requests.cancel("the hold ended", null);
            } catch (RuntimeException e) {
                // already ended
            }
        }
        return true;
    }
}
