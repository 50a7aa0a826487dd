package io.github.fencedlock.lock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** The lock-instance rule, as clients/go/instance.go. */
class InstanceTest {
    @Test
    void validInstancesAreWhatTheServiceAccepts() {
        assertTrue(Instance.valid("pod-1234.abc_def:9"));
        assertTrue(Instance.valid("a".repeat(253)));
        assertFalse(Instance.valid(""));
        assertFalse(Instance.valid(null));
        assertFalse(Instance.valid("a".repeat(254)));
        assertFalse(Instance.valid("ns/pod"));
        assertFalse(Instance.valid("pod 1"));
        assertFalse(Instance.valid("pödé"));
    }

    @Test
    void theNameIsPrefixPidAndSuffix() {
        assertEquals("pod-uid:42:0123456789abcdef", Instance.name("pod-uid", 42, "0123456789abcdef"));
        assertEquals("java:42:ff", Instance.name(null, 42, "ff"));
        assertEquals("java:42:ff", Instance.name("", 42, "ff"));
        assertEquals("java:42:ff", Instance.name("bad/prefix", 42, "ff"));
    }

    @Test
    void aLongPrefixIsCutToFit() {
        String n = Instance.name("p".repeat(253), 1234, "0123456789abcdef");
        assertEquals(253, n.length());
        assertTrue(n.endsWith(":1234:0123456789abcdef"));
        assertTrue(Instance.valid(n));
    }

    @Test
    void eachGeneratedInstanceIsItsOwn() {
        String a = Instance.generate();
        String b = Instance.generate();
        assertNotEquals(a, b);
        String pid = Long.toString(ProcessHandle.current().pid());
        assertTrue(a.matches("[A-Za-z0-9._:-]+:" + pid + ":[0-9a-f]{16}"), a);
        String env = System.getenv(Instance.ENV);
        String prefix = Instance.valid(env) ? env : Instance.DEFAULT_PREFIX;
        assertTrue(a.startsWith(prefix + ":" + pid + ":") || prefix.length() > 200, a);
        assertTrue(Instance.valid(a));
    }
}
