package io.github.fencedlock.lock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** The lock-instance rule, as clients/go/instance.go. */
class InstanceTest {
    private static final String FB = "p-0123456789abcdef";

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
    void theNameIsPrefixPidAndClientNumber() {
        // The longest LOCK_INSTANCE that fits with ":42:7" (5 characters).
        String fits = "a".repeat(253 - 5);
        Object[][] table = {
            // env, pid, n, want
            {"3f2a9c1e-8b7d-4c11-9a0e-5d6f7a8b9c0d", 42L, 1L, "3f2a9c1e-8b7d-4c11-9a0e-5d6f7a8b9c0d:42:1"},
            {"Pod_1.a:b-c", 1L, 2L, "Pod_1.a:b-c:1:2"},
            {null, 42L, 1L, FB + ":42:1"},
            {"", 42L, 1L, FB + ":42:1"},
            {"pod/with/slash", 42L, 1L, FB + ":42:1"},
            {"with space", 42L, 3L, FB + ":42:3"},
            {"pödé", 7L, 1L, FB + ":7:1"},
            {fits, 42L, 7L, fits + ":42:7"},
            {fits + "a", 42L, 7L, FB + ":42:7"},
            {"a".repeat(254), 42L, 7L, FB + ":42:7"},
            {"pod-uid", 1L, 1L, "pod-uid:1:1"},
        };
        for (Object[] c : table) {
            String got = Instance.name((String) c[0], (Long) c[1], (Long) c[2], FB);
            assertEquals(c[3], got, "env " + c[0]);
            assertTrue(Instance.valid(got), got);
        }
    }

    @Test
    void clientsAreNumberedFromOne() {
        Instance.Sequence s = new Instance.Sequence();
        assertEquals(1, s.next());
        assertEquals(2, s.next());
        assertEquals(3, s.next());
    }

    @Test
    void eachGeneratedInstanceIsTheNextClientOfThisProcess() {
        String a = Instance.generate();
        String b = Instance.generate();
        String pid = Long.toString(ProcessHandle.current().pid());
        String env = System.getenv(Instance.ENV);
        String fb = Instance.fallbackPrefix();
        assertTrue(fb.matches("p-[0-9a-f]{16}"), fb);
        assertEquals(fb, Instance.fallbackPrefix());
        int cut = a.lastIndexOf(':');
        long na = Long.parseLong(a.substring(cut + 1));
        assertTrue(na >= 1, a);
        assertEquals(Instance.name(env, ProcessHandle.current().pid(), na, fb), a);
        assertEquals(Instance.name(env, ProcessHandle.current().pid(), na + 1, fb), b);
        assertTrue(a.endsWith(":" + pid + ":" + na), a);
        assertTrue(Instance.valid(a));
    }
}
