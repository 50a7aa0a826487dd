//! Client-side metrics (issue 50, item 7), with the Prometheus project's `prometheus-client`:
//! how long acquires wait, how long holds last, and how many holds were lost (fenced).
//!
//! Labels are `class` (the lock class the service named for the key) and `outcome` only:
//! both come from fixed sets (the registry's classes, the contract's reasons, three hold
//! endings), so the series do not grow with traffic. Never a key, a token, an identity or
//! an instance: a key in a label is both a leak and a cardinality bomb.
//!
//! Off unless the application asks ([`crate::LockClient::with_metrics`]): a client without
//! metrics pays one `Option` check per acquire and per hold's end, nothing else.

use crate::error::LockError;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The class when no answer of the service named one (a refusal before any grant or
/// OpenSession for the key, an unreachable service).
pub(crate) const UNKNOWN_CLASS: &str = "unknown";

/// Keys whose class a client remembers; past it the memory starts over (a miss labels one
/// refusal `unknown`, never a wrong class).
const MAX_CLASSES: usize = 4096;

/// How a hold ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldEnd {
    /// Its owner released it (`release`, or the drop of its handle).
    Released,
    /// The fence callback ran: renewals failed until the local deadline, or the service
    /// said the session expired.
    Fenced,
    /// [`crate::LockClient::shutdown`] (or the client's last handle dropped) closed its
    /// session.
    Shutdown,
}

impl HoldEnd {
    fn label(self) -> &'static str {
        match self {
            HoldEnd::Released => "released",
            HoldEnd::Fenced => "fenced",
            HoldEnd::Shutdown => "shutdown",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    class: Arc<str>,
    outcome: Cow<'static, str>,
}

/// The lost-hold counter's one label: its outcome would always be `fenced`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabel {
    class: Arc<str>,
}

type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

/// Waits from 1 ms to about 262 s (19 buckets, ×2): an Acquire waits at most 300 s (the
/// arbiter's `acquire_seconds` has the same buckets, so the two compare bucket by bucket).
fn wait_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 19))
}

/// Holds from 1 ms to about 18.6 h (14 buckets, ×4): a lock guards one write, a leader
/// leads for hours.
fn hold_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 4.0, 14))
}

#[derive(Debug)]
struct Families {
    wait: Histograms,
    hold: Histograms,
    lost: Family<ClassLabel, Counter>,
}

/// The lock client's metric families in one Prometheus registry. Register them once per
/// registry and give a clone to every client of the process
/// ([`crate::LockClient::with_metrics`]): the clients then record into the same families
/// (a second `register` on the same registry would add the families twice, which the text
/// encoding then repeats).
///
/// - `lock_client_wait_seconds` (histogram): from an acquire call (`acquire`,
///   `acquire_shared`, `acquire_all`, `campaign`) to its answer. `outcome`: `granted`, the
///   refusal's reason in lower case (`held`, `not_granted`, `no_quorum`, ...),
///   `unavailable` for an error without a reason, `cancelled` when the caller dropped the
///   call's future. A nested (re-entrant) acquire makes no call and records nothing.
/// - `lock_client_hold_seconds` (histogram): from the grant to the hold's end. `outcome`:
///   `released`, `fenced`, `shutdown`.
/// - `lock_client_holds_lost_total` (counter): holds fenced before they were released (their
///   `on_fence` ran), by `class` only.
///
/// `class` is the lock class the service named for the key (in the acquire's answer or in
/// the OpenSession answer for it), `unknown` when no answer has named one.
#[derive(Clone, Debug)]
pub struct ClientMetrics {
    families: Arc<Families>,
}

impl ClientMetrics {
    /// Registers the families in `registry` and returns the handle to give to clients.
    pub fn register(registry: &mut Registry) -> Self {
        let families = Families {
            wait: Histograms::new_with_constructor(wait_buckets),
            hold: Histograms::new_with_constructor(hold_buckets),
            lost: Family::default(),
        };
        registry.register_with_unit(
            "lock_client_wait",
            "Time from an acquire call to its answer, by class and outcome",
            Unit::Seconds,
            families.wait.clone(),
        );
        registry.register_with_unit(
            "lock_client_hold",
            "Time from a grant to the hold's end, by class and outcome",
            Unit::Seconds,
            families.hold.clone(),
        );
        registry.register(
            "lock_client_holds_lost",
            "Holds fenced before they were released (on_fence ran), by class",
            families.lost.clone(),
        );
        Self {
            families: Arc::new(families),
        }
    }

    fn wait(&self, class: Arc<str>, outcome: Cow<'static, str>, took: Duration) {
        self.families
            .wait
            .get_or_create(&Labels { class, outcome })
            .observe(took.as_secs_f64());
    }

    /// A hold granted at `granted` ended now, as `end` says.
    pub(crate) fn hold_ended(&self, class: Arc<str>, granted: Instant, end: HoldEnd) {
        let labels = Labels {
            class,
            outcome: Cow::Borrowed(end.label()),
        };
        self.families
            .hold
            .get_or_create(&labels)
            .observe(granted.elapsed().as_secs_f64());
        if end == HoldEnd::Fenced {
            let class = labels.class;
            self.families
                .lost
                .get_or_create(&ClassLabel { class })
                .inc();
        }
    }
}

/// The wait outcome of an acquire's result.
fn outcome<T>(r: &Result<T, LockError>) -> Cow<'static, str> {
    match r {
        Ok(_) => Cow::Borrowed("granted"),
        Err(e) => match e.reason() {
            Some(reason) => Cow::Owned(reason.as_str().to_ascii_lowercase()),
            None => Cow::Borrowed("unavailable"),
        },
    }
}

/// One client's side of the metrics: the shared families, and the class the service named
/// for each key this client asked about (an acquire's refusal names none, so the class is
/// the one learned from an earlier answer for the key).
#[derive(Debug)]
pub(crate) struct Recorder {
    pub(crate) metrics: ClientMetrics,
    classes: Mutex<HashMap<String, Arc<str>>>,
}

impl Recorder {
    pub(crate) fn new(metrics: ClientMetrics) -> Self {
        Self {
            metrics,
            classes: Mutex::new(HashMap::new()),
        }
    }

    /// The service named `class` for `key` (AcquireResponse, OpenSessionResponse).
    pub(crate) fn learn(&self, key: &str, class: &str) {
        if class.is_empty() {
            return;
        }
        let mut classes = crate::state::locked(&self.classes);
        if classes.get(key).is_some_and(|c| **c == *class) {
            return;
        }
        if classes.len() >= MAX_CLASSES && !classes.contains_key(key) {
            classes.clear();
        }
        classes.insert(key.to_owned(), Arc::from(class));
    }

    pub(crate) fn class_of(&self, key: &str) -> Arc<str> {
        crate::state::locked(&self.classes)
            .get(key)
            .cloned()
            .unwrap_or_else(|| Arc::from(UNKNOWN_CLASS))
    }
}

/// The wait of one acquire call, recorded when it is answered ([`WaitTimer::finish`]) or,
/// if the caller drops the call's future first, as `cancelled` when it is dropped.
pub(crate) struct WaitTimer<'a> {
    /// None: the client has no metrics (or the wait was recorded or discarded).
    running: Option<(&'a Recorder, &'a str, Instant)>,
}

impl<'a> WaitTimer<'a> {
    /// Starts timing the call about `key` (for a set, the key its session is chosen by).
    pub(crate) fn start(recorder: Option<&'a Recorder>, key: &'a str) -> Self {
        Self {
            running: recorder.map(|r| (r, key, Instant::now())),
        }
    }

    /// The call was answered with `r`.
    pub(crate) fn finish<T>(mut self, r: &Result<T, LockError>) {
        if let Some((rec, key, started)) = self.running.take() {
            rec.metrics
                .wait(rec.class_of(key), outcome(r), started.elapsed());
        }
    }

    /// No call was made after all (a nested acquire): nothing to record.
    pub(crate) fn discard(mut self) {
        self.running = None;
    }
}

impl Drop for WaitTimer<'_> {
    fn drop(&mut self) {
        if let Some((rec, key, started)) = self.running.take() {
            rec.metrics.wait(
                rec.class_of(key),
                Cow::Borrowed("cancelled"),
                started.elapsed(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn wait_outcomes_are_the_reason_in_lower_case() {
        let cases: Vec<(Result<(), LockError>, &str)> = vec![
            (Ok(()), "granted"),
            (Err(LockError::Held), "held"),
            (Err(LockError::NotGranted), "not_granted"),
            (Err(LockError::NoQuorum), "no_quorum"),
            (Err(LockError::LeakedHold), "leaked_hold"),
            (
                Err(LockError::RateLimited {
                    retry_after: Duration::from_secs(1),
                }),
                "rate_limited",
            ),
            (
                Err(LockError::KeySetRefused {
                    why: "stores".into(),
                    message: "m".into(),
                }),
                "key_set_refused",
            ),
            // No reason of the contract: the service was not (usefully) reached.
            (Err(LockError::Unavailable("down".into())), "unavailable"),
            (Err(LockError::InvalidRequest("bad".into())), "unavailable"),
            (
                Err(LockError::Other {
                    code: tonic::Code::Internal,
                    message: "m".into(),
                }),
                "unavailable",
            ),
        ];
        for (r, want) in cases {
            assert_eq!(outcome(&r), want, "{r:?}");
        }
    }

    #[test]
    fn a_key_s_class_is_the_last_one_named_and_unknown_before() {
        let mut registry = Registry::default();
        let rec = Recorder::new(ClientMetrics::register(&mut registry));
        assert_eq!(&*rec.class_of("a"), UNKNOWN_CLASS);
        rec.learn("a", "fast");
        rec.learn("b", "");
        assert_eq!(&*rec.class_of("a"), "fast");
        assert_eq!(
            &*rec.class_of("b"),
            UNKNOWN_CLASS,
            "an empty name names nothing"
        );
        rec.learn("a", "slow");
        assert_eq!(&*rec.class_of("a"), "slow");
        // Bounded: past the limit the memory starts over.
        for i in 0..MAX_CLASSES {
            rec.learn(&format!("k{i}"), "fast");
        }
        assert!(rec.classes.lock().unwrap().len() <= MAX_CLASSES);
    }

    #[test]
    fn a_dropped_call_is_cancelled_and_a_discarded_one_is_not_recorded() {
        let mut registry = Registry::default();
        let rec = Recorder::new(ClientMetrics::register(&mut registry));
        rec.learn("k", "fast");
        drop(WaitTimer::start(Some(&rec), "k"));
        WaitTimer::start(Some(&rec), "k").discard();
        WaitTimer::start(Some(&rec), "k").finish(&Err::<(), _>(LockError::Held));
        // Without metrics nothing is timed at all.
        WaitTimer::start(None, "k").finish(&Ok::<_, LockError>(()));
        let t = text(&registry);
        assert!(
            t.contains(r#"lock_client_wait_seconds_count{class="fast",outcome="cancelled"} 1"#),
            "{t}"
        );
        assert!(
            t.contains(r#"lock_client_wait_seconds_count{class="fast",outcome="held"} 1"#),
            "{t}"
        );
        assert_eq!(
            t.matches("lock_client_wait_seconds_count").count(),
            2,
            "{t}"
        );
    }

    #[test]
    fn a_fenced_hold_is_also_counted_lost() {
        let mut registry = Registry::default();
        let m = ClientMetrics::register(&mut registry);
        let at = Instant::now();
        m.hold_ended(Arc::from("fast"), at, HoldEnd::Released);
        m.hold_ended(Arc::from("fast"), at, HoldEnd::Shutdown);
        m.hold_ended(Arc::from("fast"), at, HoldEnd::Fenced);
        let t = text(&registry);
        for outcome in ["released", "shutdown", "fenced"] {
            let line =
                format!(r#"lock_client_hold_seconds_count{{class="fast",outcome="{outcome}"}} 1"#);
            assert!(t.contains(&line), "{t}");
        }
        assert!(
            t.contains(r#"lock_client_holds_lost_total{class="fast"} 1"#),
            "{t}"
        );
        assert_eq!(t.matches("lock_client_holds_lost_total").count(), 1, "{t}");
    }
}
