package io.github.fencedlock.lock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class KeysAndEndpointTest {
    @Test
    void theLockKeyIsPercentEncodedAsTheOtherClientsDo() {
        assertEquals("pay/ledger/42", Keys.encodeKey("pay/ledger/42"));
        assertEquals("pay/a%20b/%25", Keys.encodeKey("pay/a b/%"));
        assertEquals("pay/%C3%A9t%C3%A9", Keys.encodeKey("pay/été"));
        assertEquals("pay/%7F%0A", Keys.encodeKey("pay/\u007f\n"));
    }

    @Test
    void httpsAnywherePlaintextOnlyToLoopback() {
        Endpoint e = Endpoint.parse("https://lock-edge:8443", false);
        assertEquals("lock-edge", e.host);
        assertEquals(8443, e.port);
        assertEquals("127.0.0.1", Endpoint.parse("http://127.0.0.1:15001", true).host);
        assertEquals("::1", Endpoint.parse("http://[::1]:15001", true).host);
        assertEquals("localhost", Endpoint.parse("http://localhost:15001", true).host);
        assertTrue(Endpoint.isLoopback("127.3.4.5"));
        IllegalArgumentException x = assertThrows(IllegalArgumentException.class,
                () -> Endpoint.parse("http://10.0.0.1:15001", true));
        assertTrue(x.getMessage().contains("loopback"), x.getMessage());
        assertThrows(IllegalArgumentException.class, () -> Endpoint.parse("http://lock-edge:8443", false));
        assertThrows(IllegalArgumentException.class, () -> Endpoint.parse("https://127.0.0.1:1", true));
        assertThrows(IllegalArgumentException.class, () -> Endpoint.parse("lock-edge:8443", false));
        assertThrows(IllegalArgumentException.class, () -> Endpoint.parse("https://lock-edge", false));
        // A host name that merely resolves to loopback elsewhere is not trusted as loopback.
        assertThrows(IllegalArgumentException.class, () -> Endpoint.parse("http://sidecar.local:1", true));
    }

    @Test
    void theServerIdMustBeASpiffeId() {
        assertEquals("spiffe://td/ns/edge/sa/envoy", SpiffeTls.checkSpiffeId("spiffe://td/ns/edge/sa/envoy"));
        assertThrows(IllegalArgumentException.class, () -> SpiffeTls.checkSpiffeId("https://td/x"));
        assertThrows(IllegalArgumentException.class, () -> SpiffeTls.checkSpiffeId("spiffe://"));
        assertThrows(IllegalArgumentException.class, () -> SpiffeTls.checkSpiffeId("spiffe://td/x/"));
        assertThrows(IllegalArgumentException.class, () -> SpiffeTls.checkSpiffeId(null));
    }

    @Test
    void theBuilderRefusesMissingCredentialsAndBadInstances() {
        assertThrows(IllegalArgumentException.class, () -> LockClient.builder("https://h:1").build());
        assertThrows(IllegalArgumentException.class,
                () -> LockClient.builder("http://127.0.0.1:1").meshSidecar().instance("a/b").build());
        assertThrows(IllegalArgumentException.class, () -> LockClient.builder("http://h:1").build());
    }
}
