package io.github.fencedlock.lock;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.ErrorInfo;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusException;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.Collections;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;

/**
 * A refusal or failure of the lock service. {@link #reason()} is the contract (the
 * ErrorInfo reason of domain {@code lock.v1}, or what the client decided itself);
 * {@link #metadata()} is the ErrorInfo metadata ({@code region}, {@code retry_after_ms},
 * {@code class}, {@code ttl_seconds}, {@code cluster}, {@code why}, ...). The message is the
 * status message, decoded (grpc-message is percent-encoded on the wire; grpc-java decodes
 * it). No message and no {@code toString} ever carries a token: the service never puts one
 * in a refusal, and the client never formats one.
 */
public class LockException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** The google.rpc.ErrorInfo domain of every refusal of the service. */
    public static final String ERROR_DOMAIN = "lock.v1";

    private final Reason reason;
    private final String wireReason;
    private final Status.Code code;
    private final String statusMessage;
    private final Map<String, String> metadata;

    LockException(Reason reason, String wireReason, Status.Code code, String statusMessage,
                  Map<String, String> metadata, Throwable cause) {
        super(format(reason, wireReason, code, statusMessage), cause);
        this.reason = Objects.requireNonNull(reason);
        this.wireReason = wireReason == null ? "" : wireReason;
        this.code = code;
        this.statusMessage = statusMessage == null ? "" : statusMessage;
        this.metadata = Collections.unmodifiableMap(new TreeMap<>(metadata));
    }

    /** An error the client decides itself (no wire reason). */
    static LockException client(Reason reason, String message) {
        return new LockException(reason, "", Status.Code.UNKNOWN, message, Map.of(), null);
    }

    static LockException client(Reason reason, String message, Throwable cause) {
        return new LockException(reason, "", Status.Code.UNKNOWN, message, Map.of(), cause);
    }

    private static String format(Reason reason, String wireReason, Status.Code code, String msg) {
        StringBuilder b = new StringBuilder("lock: ");
        if (reason == Reason.UNKNOWN) {
            b.append("lock service error ").append(code);
        } else {
            b.append(reason.description());
        }
        if (wireReason != null && !wireReason.isEmpty()) {
            b.append(" (").append(wireReason).append(')');
        }
        if (msg != null && !msg.isEmpty()) {
            b.append(": ").append(msg);
        }
        return b.toString();
    }

    /** Why: the wire reason, or the client's own ({@link Reason#UNAVAILABLE}, {@link Reason#FENCED}, ...). */
    public Reason reason() {
        return reason;
    }

    /** The ErrorInfo reason exactly as sent ("HELD", ...); empty when the status carried none. */
    public String wireReason() {
        return wireReason;
    }

    /** The gRPC status code ({@code UNKNOWN} for the client's own errors). */
    public Status.Code code() {
        return code;
    }

    /** The status message, decoded; empty when there was none. */
    public String statusMessage() {
        return statusMessage;
    }

    /** The ErrorInfo metadata, never null. */
    public Map<String, String> metadata() {
        return metadata;
    }

    /** Whether this is {@code r} (DRAINING also counts as UNAVAILABLE, as in Go). */
    public boolean is(Reason r) {
        return reason == r || (r == Reason.UNAVAILABLE && reason.isUnavailable());
    }

    /** How long a RATE_LIMITED refusal asks the caller to wait (1 s when the metadata does not say). */
    public Duration retryAfter() {
        try {
            long ms = Long.parseLong(metadata.getOrDefault("retry_after_ms", ""));
            if (ms >= 0 && ms <= 0xffff_ffffL) {
                return Duration.ofMillis(ms);
            }
        } catch (NumberFormatException e) {
            // the default below
        }
        return Duration.ofSeconds(1);
    }

    boolean isTransient() {
        return reason.isTransient();
    }

    /**
     * The one place a gRPC status becomes a LockException: the reason and metadata from the
     * google.rpc.ErrorInfo of domain "lock.v1" in its details (the {@code grpc-status-details-bin}
     * trailer), else by code (UNAVAILABLE, UNKNOWN, CANCELLED and DEADLINE_EXCEEDED:
     * {@link Reason#UNAVAILABLE}; any other: {@link Reason#UNKNOWN}). Null for an OK status.
     */
    public static LockException fromStatus(Status status, Metadata trailers) {
        if (status == null || status.isOk()) {
            return null;
        }
        String message = status.getDescription();
        com.google.rpc.Status details = trailers == null ? null : StatusProto.fromStatusAndTrailers(status, trailers);
        if (details != null) {
            for (Any any : details.getDetailsList()) {
                if (!any.is(ErrorInfo.class)) {
                    continue;
                }
                ErrorInfo info;
                try {
                    info = any.unpack(ErrorInfo.class);
                } catch (InvalidProtocolBufferException e) {
                    continue;
                }
                if (!ERROR_DOMAIN.equals(info.getDomain())) {
                    continue;
                }
                Reason r = Reason.fromWire(info.getReason()).orElse(Reason.UNKNOWN);
                return new LockException(r, info.getReason(), status.getCode(), message,
                        info.getMetadataMap(), status.getCause());
            }
        }
        Reason r;
        switch (status.getCode()) {
            case UNAVAILABLE:
            case UNKNOWN:
            case CANCELLED:
            case DEADLINE_EXCEEDED:
                r = Reason.UNAVAILABLE;
                break;
            default:
                r = Reason.UNKNOWN;
        }
        return new LockException(r, "", status.getCode(), message, Map.of(), status.getCause());
    }

    /** A call's failure as the client's error: a status's mapping, or UNAVAILABLE. */
    static LockException from(Throwable t) {
        if (t instanceof LockException) {
            return (LockException) t;
        }
        if (t instanceof StatusRuntimeException) {
            StatusRuntimeException e = (StatusRuntimeException) t;
            return fromStatus(e.getStatus(), e.getTrailers());
        }
        if (t instanceof StatusException) {
            StatusException e = (StatusException) t;
            return fromStatus(e.getStatus(), e.getTrailers());
        }
        Status s = Status.fromThrowable(t);
        if (s.getCode() != Status.Code.UNKNOWN) {
            return fromStatus(s, Status.trailersFromThrowable(t));
        }
        return new LockException(Reason.UNAVAILABLE, "", Status.Code.UNKNOWN, String.valueOf(t.getMessage()),
                Map.of(), t);
    }
}
