//! The Rust client's conformance driver (`clients/conformance/README.md`): JSON commands on
//! stdin, answers and events on stdout, each command run as its own task. It maps each
//! command to one `lock_client` call and holds no lock rule of its own.

use lock_client::{Change, Config, HeldSet, Hold, LockClient, LockError, SharedHold};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt as _, BufReader};

/// A hold of any kind, as the protocol names it.
enum Held {
    One(Hold),
    Shared(SharedHold),
    Set(HeldSet),
}

#[derive(Default)]
struct State {
    clients: HashMap<String, LockClient>,
    holds: HashMap<String, Held>,
}

type Shared = Arc<Mutex<State>>;

/// One line to stdout, whole (stdout's lock is held for the write).
fn say(v: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set"))
}

/// The reason name of a client error, from its type (`LockError::reason`); errors the
/// client decided itself carry none.
fn reason(e: &LockError) -> &'static str {
    e.reason().map(|r| r.as_str()).unwrap_or("UNAVAILABLE")
}

fn refused(e: &LockError) -> Value {
    json!({"ok": false, "reason": reason(e), "message": e.to_string()})
}

fn driver_error(msg: impl Into<String>) -> Value {
    json!({"ok": false, "reason": "DRIVER", "message": msg.into()})
}

fn str_of<'a>(cmd: &'a Value, field: &str) -> Result<&'a str, Value> {
    cmd[field]
        .as_str()
        .ok_or_else(|| driver_error(format!("no `{field}`")))
}

fn client_of(state: &Shared, cmd: &Value) -> Result<LockClient, Value> {
    let name = str_of(cmd, "client")?;
    state
        .lock()
        .map_err(|_| driver_error("state poisoned"))?
        .clients
        .get(name)
        .cloned()
        .ok_or_else(|| driver_error(format!("no client `{name}`")))
}

/// The fence callback: the `fenced` event for `hold`.
fn on_fence(hold: &str) -> impl Fn() + Send + Sync + 'static {
    let hold = hold.to_owned();
    move || say(&json!({"event": "fenced", "hold": hold}))
}

async fn run(state: Shared, cmd: Value) -> Result<Value, Value> {
    let op = str_of(&cmd, "op")?;
    let wait = Duration::from_millis(cmd["wait_ms"].as_u64().unwrap_or(0));
    match op {
        "client" => {
            let name = str_of(&cmd, "client")?.to_owned();
            let config = (|| -> Result<Config, String> {
                Ok(Config::files(
                    env("LOCK_ENDPOINT")?,
                    env("LOCK_SVID")?,
                    env("LOCK_SVID_KEY")?,
                    env("LOCK_CA")?,
                    "localhost",
                ))
            })()
            .map_err(driver_error)?;
            let config = match cmd["instance"].as_str() {
                Some(i) => config.with_instance(i),
                None => config,
            };
            let client = LockClient::new(config).map_err(|e| refused(&e))?;
            let instance = client.instance().to_owned();
            state
                .lock()
                .map_err(|_| driver_error("state poisoned"))?
                .clients
                .insert(name, client);
            Ok(json!({"ok": true, "instance": instance}))
        }
        "acquire" | "acquire_shared" | "acquire_all" | "campaign" => {
            let client = client_of(&state, &cmd)?;
            let hold = str_of(&cmd, "hold")?.to_owned();
            let fence = on_fence(&hold);
            let (token, held) = match op {
                "acquire" => {
                    let h = client
                        .acquire(str_of(&cmd, "key")?, wait, fence)
                        .await
                        .map_err(|e| refused(&e))?;
                    (h.token(), Held::One(h))
                }
                "acquire_shared" => {
                    let h = client
                        .acquire_shared(str_of(&cmd, "key")?, wait, fence)
                        .await
                        .map_err(|e| refused(&e))?;
                    (h.token(), Held::Shared(h))
                }
                "acquire_all" => {
                    let keys: Vec<String> = cmd["keys"]
                        .as_array()
                        .ok_or_else(|| driver_error("no `keys`"))?
                        .iter()
                        .filter_map(|k| k.as_str().map(str::to_owned))
                        .collect();
                    let h = client
                        .acquire_all(&keys, wait, fence)
                        .await
                        .map_err(|e| refused(&e))?;
                    (h.token(), Held::Set(h))
                }
                _ => {
                    // A campaign waits as long as it takes; the command's wait bounds it.
                    let key = str_of(&cmd, "key")?;
                    let term = tokio::time::timeout(wait, client.campaign(key, fence))
                        .await
                        .map_err(|_| json!({"ok": false, "reason": "HELD", "message": "not elected within the wait"}))?
                        .map_err(|e| refused(&e))?;
                    (term.term(), Held::One(term.into_hold()))
                }
            };
            state
                .lock()
                .map_err(|_| driver_error("state poisoned"))?
                .holds
                .insert(hold, held);
            Ok(json!({"ok": true, "token": token.as_u64().to_string()}))
        }
        "release" => {
            let hold = str_of(&cmd, "hold")?;
            let held = state
                .lock()
                .map_err(|_| driver_error("state poisoned"))?
                .holds
                .remove(hold)
                .ok_or_else(|| driver_error(format!("no hold `{hold}`")))?;
            match held {
                Held::One(h) => h.release().await,
                Held::Shared(h) => h.release().await,
                Held::Set(h) => h.release().await,
            }
            .map_err(|e| refused(&e))?;
            Ok(json!({"ok": true}))
        }
        "state" => {
            let hold = str_of(&cmd, "hold")?;
            let st = state.lock().map_err(|_| driver_error("state poisoned"))?;
            let held = st
                .holds
                .get(hold)
                .ok_or_else(|| driver_error(format!("no hold `{hold}`")))?;
            Ok(match held {
                Held::One(h) => json!({
                    "ok": true,
                    "can_start": h.can_start(),
                    "fenced": h.is_fenced(),
                    "remaining_ms": u64::try_from(h.remaining_ttl().as_millis()).unwrap_or(u64::MAX),
                }),
                Held::Shared(h) => {
                    json!({"ok": true, "can_start": h.can_start(), "fenced": h.is_fenced()})
                }
                Held::Set(h) => {
                    json!({"ok": true, "can_start": h.can_start(), "fenced": h.is_fenced()})
                }
            })
        }
        "observe" => {
            let client = client_of(&state, &cmd)?;
            let obs = str_of(&cmd, "obs")?.to_owned();
            let mut o = client.observe(str_of(&cmd, "key")?);
            // The stream opens on the first `next`; the first change (`current`) is the
            // answer that it is open.
            let first = o.next().await.map_err(|e| refused(&e))?;
            tokio::spawn(async move {
                let mut next = Ok(first);
                loop {
                    match next {
                        Ok(c) => say(&json!({
                            "event": "observed",
                            "obs": obs,
                            "revision": c.revision.to_string(),
                            "held": c.held,
                            "kind": kind(c.change),
                        })),
                        Err(e) => {
                            say(
                                &json!({"event": "observe_error", "obs": obs, "reason": reason(&e), "message": e.to_string()}),
                            );
                            return;
                        }
                    }
                    next = o.next().await;
                }
            });
            Ok(json!({"ok": true}))
        }
        "shutdown" => {
            let client = client_of(&state, &cmd)?;
            client.shutdown().await.map_err(|e| refused(&e))?;
            Ok(json!({"ok": true}))
        }
        other => Err(driver_error(format!("unknown op `{other}`"))),
    }
}

fn kind(c: Change) -> &'static str {
    match c {
        Change::Current => "current",
        Change::Granted => "granted",
        Change::Released => "released",
        Change::Expired => "expired",
        Change::Closed => "closed",
        Change::Forced => "forced",
        Change::Revoked => "revoked",
    }
}

#[tokio::main]
async fn main() {
    // The client's warnings (a failed keepalive, why a hold was fenced) go to stderr,
    // which the conductor keeps for its failure report; stdout is the protocol's alone.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "lock_client=info".into()),
        )
        .init();
    let state: Shared = Arc::default();
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let cmd: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("not a command: {e}");
                continue;
            }
        };
        let id = cmd["id"].clone();
        if cmd["op"] == json!("exit") {
            say(&json!({"id": id, "ok": true}));
            return;
        }
        let state = state.clone();
        tokio::spawn(async move {
            let mut answer = run(state, cmd).await.unwrap_or_else(|e| e);
            answer["id"] = id;
            say(&answer);
        });
    }
}
