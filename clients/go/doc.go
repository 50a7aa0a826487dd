// Package lock is the Go client of the fenced lock service: lock.v1 through the lock edge
// (Envoy) over SPIFFE mutual TLS, answered by the arbiter with 64-bit fencing tokens.
//
// It behaves as the Rust client (lock-client) does:
//
//   - One session (etcd lease) per TTL and cluster per Client, opened on first use; one
//     KeepAlive stream per session renews every hold attached to it, every TTL/3.
//   - Drain then fence (ADR-12): Hold.CanStart turns false at the first failed renewal; at
//     the monotonic SEND time of the last successful renewal + TTL − 1 s the hold's
//     required OnFence runs and the hold is dead, before the store's lease can expire.
//   - Re-entrancy: nested acquires of a key this Client holds count locally; only the
//     outermost acquire and the last release call the service.
//   - Instances: each Client is its own contender (`lock-instance`:
//     `<LOCK_INSTANCE>:<pid>:<n>`, n numbering the process's Clients from 1, with a random
//     per-process `p-<16 hex>` prefix when LOCK_INSTANCE is unset or invalid), so two
//     Clients of a process, or processes sharing one LOCK_INSTANCE, queue behind each
//     other instead of being told LEAKED_HOLD.
//   - Each lock is one Hold stream (the acquire and its release on one HTTP/2 stream),
//     every keyed call carries its key as `lock-key` metadata.
//   - Refusals are *Error values matching a sentinel per reason (ErrHeld, ErrLeakedHold,
//     ErrNoQuorum, ...) with errors.Is; transient ones are retried inside the context.
//   - Observe follows a key's holder, resuming a broken stream after the last revision
//     and store epoch seen; Campaign is leader election (the term is the token);
//     AcquireAll takes a set of keys with one token; AcquireShared takes a shared hold;
//     AcquirePermit takes one permit of a semaphore (a Permit: its number and its own
//     token, nested on a second acquire as holds are). Package leaderelection wraps
//     Campaign for Kubernetes controllers.
//   - Metrics: wait and hold times and lost holds as OpenTelemetry instruments
//     (MetricWaitDuration, MetricHoldDuration, MetricHoldsLost) by lock class and outcome,
//     on WithMeterProvider's provider or the global one (a no-op until an SDK is set).
//
// Example:
//
//	c, err := lock.Dial(ctx, "https://lock-edge:8443",
//		lock.WithSVIDFiles("/run/svid/svid.pem", "/run/svid/svid.key", "/run/svid/bundle.pem"),
//		lock.WithServerID("spiffe://example.org/ns/edge/sa/envoy"))
//	if err != nil {
//		return err
//	}
//	defer c.Close() // closes the sessions: waiters are granted at once
//
//	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
//	defer cancel()
//	h, err := c.Acquire(wctx, "pay/ledger/42", lock.WithOnFence(stopWork))
//	if errors.Is(err, lock.ErrHeld) {
//		return retryLater()
//	} else if err != nil {
//		return err
//	}
//	defer h.Release(ctx)
//	if h.CanStart() {
//		// UPDATE ledger SET ..., fence = $token WHERE id = 42 AND fence < $token
//		_, err = db.ExecContext(ctx, update, int64(h.Token()))
//	}
package lock
