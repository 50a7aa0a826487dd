package io.github.fencedlock.lock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.rpc.ErrorInfo;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Every refusal reason of lock.v1 becomes its Reason, from the status details (the error table). */
class ErrorMappingTest {
    /** The reasons of docs/src/reference/errors.md with their gRPC codes (lock.proto's table). */
    static final Object[][] TABLE = {
        {"UNAUTHENTICATED", Status.Code.UNAUTHENTICATED, Reason.UNAUTHENTICATED},
        {"NOT_GRANTED", Status.Code.PERMISSION_DENIED, Reason.NOT_GRANTED},
        {"REGION_REDIRECT", Status.Code.FAILED_PRECONDITION, Reason.REGION_REDIRECT},
        {"RATE_LIMITED", Status.Code.RESOURCE_EXHAUSTED, Reason.RATE_LIMITED},
        {"INVALID_KEY", Status.Code.INVALID_ARGUMENT, Reason.INVALID_KEY},
        {"MALFORMED_REQUEST", Status.Code.INVALID_ARGUMENT, Reason.MALFORMED_REQUEST},
        {"HELD", Status.Code.ABORTED, Reason.HELD},
        {"HELD", Status.Code.DEADLINE_EXCEEDED, Reason.HELD},
        {"LEAKED_HOLD", Status.Code.FAILED_PRECONDITION, Reason.LEAKED_HOLD},
        {"STALE_TOKEN", Status.Code.FAILED_PRECONDITION, Reason.STALE_TOKEN},
        {"SESSION_EXPIRED", Status.Code.NOT_FOUND, Reason.SESSION_EXPIRED},
        {"WRONG_SESSION_TTL", Status.Code.FAILED_PRECONDITION, Reason.WRONG_SESSION_TTL},
        {"WRONG_SESSION_PLACE", Status.Code.FAILED_PRECONDITION, Reason.WRONG_SESSION_PLACE},
        {"SEALED", Status.Code.UNAVAILABLE, Reason.SEALED},
        {"NO_QUORUM", Status.Code.UNAVAILABLE, Reason.NO_QUORUM},
        {"STORE_FULL", Status.Code.UNAVAILABLE, Reason.STORE_FULL},
        {"DRAINING", Status.Code.UNAVAILABLE, Reason.DRAINING},
        {"MOVING", Status.Code.UNAVAILABLE, Reason.MOVING},
        {"STREAM_FULL", Status.Code.RESOURCE_EXHAUSTED, Reason.STREAM_FULL},
        {"HISTORY_COMPACTED", Status.Code.OUT_OF_RANGE, Reason.HISTORY_COMPACTED},
        {"KEY_SET_REFUSED", Status.Code.FAILED_PRECONDITION, Reason.KEY_SET_REFUSED},
        {"UNKNOWN_METHOD", Status.Code.UNIMPLEMENTED, Reason.UNKNOWN_METHOD},
        {"INTERNAL", Status.Code.INTERNAL, Reason.INTERNAL},
    };

    static StatusRuntimeException refusal(Status.Code code, String domain, String reason, String message,
                                          Map<String, String> md) {
        com.google.rpc.Status s = com.google.rpc.Status.newBuilder()
                .setCode(code.value())
                .setMessage(message)
                .addDetails(Any.pack(ErrorInfo.newBuilder().setDomain(domain).setReason(reason).putAllMetadata(md).build()))
                .build();
        return StatusProto.toStatusRuntimeException(s);
    }

    @Test
    void everyReasonOfTheTableMapsToItsReason() {
        for (Object[] row : TABLE) {
            StatusRuntimeException x = refusal((Status.Code) row[1], "lock.v1", (String) row[0], "why: 50% done", Map.of("k", "v"));
            LockException e = LockException.from(x);
            assertEquals(row[2], e.reason(), (String) row[0]);
            assertEquals(row[0], e.wireReason());
            assertEquals(row[1], e.code());
            assertEquals("why: 50% done", e.statusMessage());
            assertEquals(Map.of("k", "v"), e.metadata());
            assertTrue(e.getMessage().contains("(" + row[0] + ")"), e.getMessage());
            assertTrue(e.reason().isWireReason());
        }
        // Every wire reason the enum knows is in the table (no reason is left unmapped).
        long wire = java.util.Arrays.stream(Reason.values()).filter(Reason::isWireReason).count();
        assertEquals(TABLE.length - 1, wire);
    }

    @Test
    void theSameNamesAsTheGoClient() {
        for (String r : new String[] {"UNAUTHENTICATED", "NOT_GRANTED", "REGION_REDIRECT", "RATE_LIMITED",
                "INVALID_KEY", "MALFORMED_REQUEST", "HELD", "LEAKED_HOLD", "STALE_TOKEN", "SESSION_EXPIRED",
                "WRONG_SESSION_TTL", "WRONG_SESSION_PLACE", "SEALED", "NO_QUORUM", "STORE_FULL", "DRAINING",
                "MOVING", "STREAM_FULL", "HISTORY_COMPACTED", "KEY_SET_REFUSED", "UNKNOWN_METHOD", "INTERNAL"}) {
            assertEquals(r, Reason.fromWire(r).orElseThrow().name());
        }
        for (String r : new String[] {"UNAVAILABLE", "FENCED", "ON_FENCE_REQUIRED", "CLOSED"}) {
            assertFalse(Reason.valueOf(r).isWireReason());
            assertTrue(Reason.fromWire(r).isEmpty());
        }
    }

    @Test
    void withoutAReasonOfTheDomainTheCodeDecides() {
        assertEquals(Reason.UNAVAILABLE, LockException.from(refusal(Status.Code.UNAVAILABLE, "other", "HELD", "", Map.of())).reason());
        for (Status.Code c : new Status.Code[] {Status.Code.UNAVAILABLE, Status.Code.UNKNOWN, Status.Code.CANCELLED,
                Status.Code.DEADLINE_EXCEEDED}) {
            LockException e = LockException.from(new StatusRuntimeException(Status.fromCode(c)));
            assertEquals(Reason.UNAVAILABLE, e.reason(), c.name());
            assertEquals("", e.wireReason());
        }
        LockException e = LockException.from(new StatusRuntimeException(Status.PERMISSION_DENIED.withDescription("no")));
        assertEquals(Reason.UNKNOWN, e.reason());
        assertEquals("lock: lock service error PERMISSION_DENIED: no", e.getMessage());
        LockException unknown = LockException.from(refusal(Status.Code.INTERNAL, "lock.v1", "SOMETHING_NEW", "", Map.of()));
        assertEquals(Reason.UNKNOWN, unknown.reason());
        assertEquals("SOMETHING_NEW", unknown.wireReason());
        assertNull(LockException.fromStatus(Status.OK, new Metadata()));
    }

    @Test
    void drainingIsAlsoUnavailableAndTheTransientOnesRetry() {
        LockException d = LockException.from(refusal(Status.Code.UNAVAILABLE, "lock.v1", "DRAINING", "", Map.of()));
        assertTrue(d.is(Reason.DRAINING));
        assertTrue(d.is(Reason.UNAVAILABLE));
        assertFalse(d.is(Reason.HELD));
        for (Reason r : Reason.values()) {
            boolean t = r == Reason.NO_QUORUM || r == Reason.UNAVAILABLE || r == Reason.DRAINING
                    || r == Reason.RATE_LIMITED || r == Reason.MOVING;
            assertEquals(t, r.isTransient(), r.name());
        }
    }

    @Test
    void rateLimitedSaysWhenToRetry() {
        LockException r = LockException.from(refusal(Status.Code.RESOURCE_EXHAUSTED, "lock.v1", "RATE_LIMITED", "",
                Map.of("retry_after_ms", "250")));
        assertEquals(Duration.ofMillis(250), r.retryAfter());
        LockException none = LockException.from(refusal(Status.Code.RESOURCE_EXHAUSTED, "lock.v1", "RATE_LIMITED", "", Map.of()));
        assertEquals(Duration.ofSeconds(1), none.retryAfter());
    }

    @Test
    void theClientsOwnErrorsHaveNoWireReason() {
        LockException e = LockException.client(Reason.FENCED, "the hold was fenced before its release");
        assertEquals("lock: the hold was fenced: its session could not be renewed in time: the hold was fenced before its release",
                e.getMessage());
        assertEquals("", e.wireReason());
        assertTrue(e.metadata().isEmpty());
    }
}
