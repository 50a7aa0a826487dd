//! `grpc.health.v1` for Envoy's active health checks (and any gRPC health prober).
//!
//! SERVING only while the store answers within the store timeout with an epoch record this
//! arbiter's seal accepts, and the arbiter is not draining; NOT_SERVING otherwise (sealed,
//! no quorum, a restart under way). Envoy's arbiter cluster then takes the arbiter out of
//! the ring, so a key's requests go to the next owner instead of waiting for connections to
//! fail. The check is a linearizable read of the epoch record every `every`
//! (`--health-every-ms`, default [`CHECK_EVERY`]).

use crate::error::ArbiterError;
use crate::ops::drain::Drain;
use crate::ops::metrics::METRICS;
use crate::serve::engine::Engine;
use std::sync::Arc;
use std::time::Duration;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

/// The service name Envoy asks about; "" (the whole server) reports the same.
pub const SERVICE_NAME: &str = "lock.v1.Lock";
/// How often the store is read for the health answer, by default.
#[expect(dead_code, reason = "the binary's flag repeats it (issue 51 item 4)")]
pub const CHECK_EVERY: Duration = Duration::from_millis(500);

/// The health answer from the last store check and the drain state.
pub fn status(check: &Result<u16, ArbiterError>, draining: bool) -> ServingStatus {
    match (check, draining) {
        (Ok(_), false) => ServingStatus::Serving,
        _ => ServingStatus::NotServing,
    }
}

/// Checks the store every `every` and on the drain's start, and reports.
pub async fn run(engine: Arc<Engine>, reporter: HealthReporter, drain: Drain, every: Duration) {
    loop {
        let check = engine.check_epoch().await;
        match &check {
            Ok(epoch) => {
                METRICS.sealed.set(0);
                METRICS.epoch.set(i64::from(*epoch));
            }
            Err(ArbiterError::Sealed(_)) => {
                METRICS.sealed.set(1);
            }
            Err(_) => {}
        }
        let s = status(&check, drain.is_draining());
        METRICS.serving.set(i64::from(s == ServingStatus::Serving));
        reporter.set_service_status(SERVICE_NAME, s).await;
        reporter.set_service_status("", s).await;
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = drain.started(), if !drain.is_draining() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_only_with_a_sealed_epoch_and_no_drain() {
        let cases: [(Result<u16, ArbiterError>, bool, ServingStatus); 6] = [
            (Ok(1), false, ServingStatus::Serving),
            (Ok(1), true, ServingStatus::NotServing),
            (
                Err(ArbiterError::NoQuorum),
                false,
                ServingStatus::NotServing,
            ),
            (
                Err(ArbiterError::Sealed("no epoch record".into())),
                false,
                ServingStatus::NotServing,
            ),
            (
                Err(ArbiterError::StoreFull),
                false,
                ServingStatus::NotServing,
            ),
            (Err(ArbiterError::NoQuorum), true, ServingStatus::NotServing),
        ];
        for (check, draining, want) in cases {
            assert_eq!(
                status(&check, draining),
                want,
                "{check:?} draining={draining}"
            );
        }
    }
}
