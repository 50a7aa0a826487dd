package io.github.fencedlock.lock;

import java.nio.file.Path;
import java.time.Duration;

/**
 * The second JVM of {@link StackTest#processesSharingAnInstanceQueue}: acquires the key
 * (waiting), says so on stdout, releases and exits. Its instance comes from LOCK_INSTANCE,
 * set by the parent.
 */
public final class ChildAcquire {
    private ChildAcquire() {}

    public static void main(String[] args) {
        String key = args[0];
        try (LockClient c = LockClient.builder(System.getenv("LOCK_ENDPOINT"))
                .svidFiles(Path.of(System.getenv("LOCK_SVID")), Path.of(System.getenv("LOCK_SVID_KEY")),
                        Path.of(System.getenv("LOCK_CA")))
                .serverId(StackTest.serverId())
                .build()) {
            System.out.println("INSTANCE " + c.instance());
            System.out.flush();
            try (Hold h = c.acquire(key, AcquireOptions.builder().onFence(() -> { })
                    .timeout(Duration.ofSeconds(30)).build())) {
                System.out.println("ACQUIRED " + Long.toUnsignedString(h.token()));
                System.out.flush();
            }
        } catch (RuntimeException e) {
            System.out.println("ERROR " + e);
            System.exit(1);
        }
        System.exit(0);
    }
}
