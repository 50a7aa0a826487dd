//! The gate's observer (issue 35): while the load and the faults run, it follows every key
//! of each generation (FIFO and durable) with lock-client's `observe`, through the edge,
//! from the generation's start until a few generations later (frozen holders come back to
//! old keys), and records every answer. `observed::check` then holds them to the store log.

use super::history::mono_ns;
use super::observed::Seen;
use lock_client::{Config, LockClient};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinSet;

/// What to observe and for how long.
pub struct ObservePlan {
    pub endpoint: String,
    pub svid: lock_integration::pki::SvidFiles,
    /// `<prefix>/<run>` for each class's prefix: keys are `<prefix>/<run>/g<g>/k<i>`.
    pub keys: Vec<String>,
    pub per_generation: u32,
    pub origin: u64,
    pub generation: Duration,
    /// Generations a key is followed for after its own.
    pub follow: u32,
    /// CLOCK_MONOTONIC ns: no observation starts after it.
    pub soft_end: u64,
}

/// Runs until `stop` resolves; returns every answer, and the observations that ended on an
/// error (a refusal, or the service unreachable for a minute), counted by why.
pub async fn run(
    plan: ObservePlan,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<(Vec<Seen>, BTreeMap<String, usize>)> {
    let client = LockClient::new(
        Config::files(
            plan.endpoint.clone(),
            &plan.svid.cert,
            &plan.svid.key,
            &plan.svid.ca,
            "localhost",
        )
        .with_instance("gate-observer"),
    )?;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut streams = JoinSet::new();
    let gen_ns = u64::try_from(plan.generation.as_nanos())?.max(1);
    let started = async {
        let mut g = 0u64;
        let mut next_stream = 0u32;
        loop {
            let at = plan.origin + g * gen_ns;
            if at > plan.soft_end {
                // Wait for the stop: the last observations run on.
                std::future::pending::<()>().await;
            }
            let wait = at.saturating_sub(mono_ns());
            tokio::time::sleep(Duration::from_nanos(wait)).await;
            let follow = plan.generation * (plan.follow + 1);
            for prefix in &plan.keys {
                for i in 0..plan.per_generation {
                    let key = format!("{prefix}/g{g}/k{i}");
                    next_stream += 1;
                    streams.spawn(follow_key(
                        client.clone(),
                        key,
                        next_stream,
                        follow,
                        seen.clone(),
                    ));
                }
            }
            g += 1;
        }
    };
    tokio::select! {
        () = started => {}
        () = stop => {}
    }
    let mut failed = BTreeMap::new();
    streams.abort_all();
    while let Some(r) = streams.join_next().await {
        if let Ok(Err(e)) = r {
            *failed.entry(why(&e)).or_default() += 1;
        }
    }
    let seen = std::mem::take(&mut *seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?);
    Ok((seen, failed))
}

/// An observation's end in a word: the contract's reason, else what the client decided.
fn why(e: &lock_client::LockError) -> String {
    match e.reason() {
        Some(r) => r.as_str().to_owned(),
        None => {
            let text = e.to_string();
            text.split(':').next().unwrap_or(&text).to_owned()
        }
    }
}

async fn follow_key(
    client: LockClient,
    key: String,
    stream: u32,
    follow: Duration,
    seen: Arc<Mutex<Vec<Seen>>>,
) -> Result<(), lock_client::LockError> {
    let mut observation = client.observe(&key);
    let until = tokio::time::Instant::now() + follow;
    loop {
        let o = match tokio::time::timeout_at(until, observation.next()).await {
            Ok(o) => o?,
            Err(_) => return Ok(()),
        };
        let change = format!("{:?}", o.change).to_lowercase();
        if let Ok(mut s) = seen.lock() {
            s.push(Seen {
                stream,
                key: key.clone(),
                change,
                revision: o.revision,
                held: o.held,
                holder: o.holder.as_ref().map(|h| h.spiffe_id.clone()),
                grant_revision: o.holder.as_ref().map_or(0, |h| h.grant_revision),
                gap: o.gap,
            });
        }
    }
}

/// `observe.jsonl` in a round's history.
pub fn write(path: &Path, seen: &[Seen]) -> std::io::Result<()> {
    let lines: Vec<String> = seen
        .iter()
        .filter_map(|s| serde_json::to_string(s).ok())
        .collect();
    std::fs::write(path, lines.join("\n"))
}

/// Reads `observe.jsonl`; None when the round had no observer.
pub fn read(path: &Path) -> anyhow::Result<Option<Vec<Seen>>> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(None);
    };
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        out.push(serde_json::from_str(line)?);
    }
    Ok(Some(out))
}
