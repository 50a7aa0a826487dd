//! Issue 36: lock-admin's explorer page in headless Chromium, signed in at a real IdP
//! (npm oidc-provider), over a stack with real etcd (lock-admin as the `force` user) and
//! arbiters behind Envoy. The page stays open while the test changes the store: a key
//! taken by a client appears, a waiter's count rises, a release removes the row, all by
//! the page's own live update (seen failing with it switched off). A viewer reads and is
//! offered nothing to act on; a person with neither role is refused; an operator files a
//! force release from a key's page into the two-person flow; the key's page shows its
//! latest rows from the audit store (a tailer on PostgreSQL); no token appears in the
//! page, its live section or its API.
//!
//! Screenshots go to `LOCK_SCREENSHOT_DIR` (a folder) when it is set: the manual's come from
//! here.

use lock_integration::Stack;
use lock_integration::audit::Tailer;
use lock_integration::oidc::{Admin, Idp, node_tools};
use lock_integration::paths::workspace_root;
use lock_integration::postgres::Postgres;
use lock_integration::registry::{FAIR_PREFIX, SHARED_PREFIX, waiter_id};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// A Chromium page driven line by line (`integration/node/explorer.mjs`).
struct Browser {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Browser {
    fn start(url: &str, width: u32, height: u32) -> Self {
        let mut child = Command::new("node")
            .arg(workspace_root().join("integration/node/explorer.mjs"))
            .args(["--url", url, "--width", &width.to_string()])
            .args(["--height", &height.to_string()])
            .env("LOCK_NODE_TOOLS", node_tools())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
        }
    }

    /// One command; its answer (every command is bounded by its own timeout in the
    /// script, 20 s unless it says).
    fn ask(&mut self, command: Value) -> Value {
        writeln!(self.stdin, "{command}").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(line.trim())
            .unwrap_or_else(|e| panic!("explorer.mjs answered {line:?} to {command}: {e}"))
    }

    fn ok(&mut self, command: Value) -> Value {
        let answer = self.ask(command.clone());
        assert_eq!(answer["ok"], true, "{command}: {answer}");
        answer
    }

    fn html(&mut self) -> String {
        self.ok(json!({"op": "html"}))["html"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    fn shot(&mut self, name: &str) {
        if let Some(dir) = std::env::var_os("LOCK_SCREENSHOT_DIR") {
            let path = std::path::Path::new(&dir).join(name);
            self.ok(json!({"op": "shot", "path": path, "full": true}));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn row(key: &str) -> String {
    format!("tr[data-key=\"{key}\"]")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_explorer_page_follows_the_store_live_and_shows_no_token() {
    let (stack, _registry) = Stack::with_test_registry().await.unwrap();
    let dir = stack.dir.clone();
    let access = stack.etcd_access();
    let ports = lock_integration::process::free_ports(2).unwrap();
    let admin_url = format!("http://127.0.0.1:{}", ports[0]);
    let idp = Idp::start(&dir, ports[1], &[format!("{admin_url}/callback")]).unwrap();
    let registry =
        lock_integration::registry::write_test_registry(&dir.join("admin-registry")).unwrap();
    // The audit trail, for the key's page: a tailer writing PostgreSQL, lock-admin reading.
    let pg = Postgres::start(&dir.join("audit-pg")).unwrap();
    let _tailer = Tailer::start(&dir, &access, &pg.url(), "tailer", &[]).unwrap();
    let db = pg.url();
    let admin = Admin::start_with(
        &dir,
        &access,
        &idp,
        &admin_url,
        Some(&registry),
        &["--audit-db", &db],
    )
    .unwrap();
    let url = admin.url.as_str();

    // --- A viewer opens the namespace; holds arrive while the page stays open. ---
    let mut vera = Browser::start(url, 1280, 800);
    let signed = vera.ok(json!({"op": "signin", "user": "vera"}));
    assert_eq!(signed["error"], Value::Null, "{signed}");
    vera.ok(json!({"op": "open", "path": "/explorer"}));
    let names = vera.html();
    assert!(names.contains("viewer: read only"), "{names}");
    vera.ok(json!({"op": "open", "path": "/explorer?ns=pay"}));
    vera.ok(json!({"op": "wait", "selector": "#no-holds"}));

    let fair = format!("{FAIR_PREFIX}/page");
    let shared = format!("{SHARED_PREFIX}/page");
    let holder = stack.lock_client(&waiter_id(0)).unwrap();
    let held = holder
        .acquire(&fair, Duration::from_secs(5), || {})
        .await
        .unwrap();
    // The same session holds a second key: the first key's page names it.
    let other = format!("{FAIR_PREFIX}/page-other");
    let held_too = holder
        .acquire(&other, Duration::from_secs(5), || {})
        .await
        .unwrap();
    vera.ok(json!({"op": "wait", "selector": row(&fair), "timeout": 15000}));
    let waits = format!("{} td.waiters", row(&fair));
    assert_eq!(
        vera.ok(json!({"op": "text", "selector": waits}))["text"],
        "0"
    );

    // A second identity waits in the durable queue: the count rises on the open page.
    let waiter = stack.lock_client(&waiter_id(1)).unwrap();
    let waiting = {
        let fair = fair.clone();
        tokio::spawn(async move { waiter.acquire(&fair, Duration::from_secs(60), || {}).await })
    };
    vera.ok(json!({"op": "waitText", "selector": waits, "text": "1", "timeout": 15000}));
    let reader = stack.lock_client(&waiter_id(2)).unwrap();
    let read = reader
        .acquire_shared(&shared, Duration::from_secs(5), || {})
        .await
        .unwrap();
    vera.ok(json!({"op": "wait", "selector": row(&shared), "timeout": 15000}));
    let state = vera.ok(json!({"op": "text", "selector": format!("{} .state", row(&fair))}));
    assert_eq!(state["text"], "held, 1 waiting", "the state in words");
    vera.shot("explorer.png");
    vera.ok(json!({"op": "viewport", "width": 420, "height": 800}));
    vera.shot("explorer-narrow.png");
    vera.ok(json!({"op": "viewport", "width": 1280, "height": 800}));

    // Keyboard: the first tab stops are the header's links, then the filter.
    vera.ok(json!({"op": "press", "key": "Tab"}));
    let focused = vera.ok(json!({"op": "focused"}));
    assert!(
        focused["focused"].as_str().unwrap_or("").starts_with("a "),
        "{focused}"
    );

    // No token anywhere: the page, its live section, its JSON API.
    let tokens = [
        held.token().as_u64(),
        held_too.token().as_u64(),
        read.token().as_u64(),
    ];
    let page = vera.html();
    let section = vera.ok(json!({"op": "get", "path": "/explorer/rows?ns=pay"}));
    assert_eq!(section["status"], 200);
    let vera_token = idp.sign_in("vera").await.unwrap();
    let http = reqwest::Client::new();
    let api = http
        .get(format!("{url}/v1/explorer/holds?namespace=pay"))
        .bearer_auth(&vera_token)
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), 200);
    let api: Value = api.json().await.unwrap();
    assert_eq!(api["rows"].as_array().map(Vec::len), Some(3), "{api}");
    for t in tokens {
        for (what, text) in [
            ("page", page.as_str()),
            ("live section", section["text"].as_str().unwrap()),
            ("API", &api.to_string()),
        ] {
            assert!(!text.contains(&t.to_string()), "a token in the {what}");
        }
    }

    // The viewer's key page: the holds, the key's grant in its history (once the tailer
    // has it), no force-release form.
    vera.ok(json!({"op": "open", "path": format!("/explorer/key?key={fair}")}));
    let mut detail = vera.html();
    for _ in 0..20 {
        if detail.contains("<td class=\"kind\">grant</td>") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        vera.ok(json!({"op": "open", "path": format!("/explorer/key?key={fair}")}));
        detail = vera.html();
    }
    assert!(detail.contains("<td class=\"kind\">grant</td>"), "{detail}");
    assert!(detail.contains(&waiter_id(0)) && !detail.contains("file-force-release"));
    assert!(
        detail.contains(&format!(
            "holds 1 other key(s): <a href=\"/explorer/key?key={other}\">"
        )),
        "{detail}"
    );
    for t in tokens {
        assert!(
            !detail.contains(&t.to_string()),
            "a token on the key's page"
        );
    }
    vera.ok(json!({"op": "open", "path": "/explorer?ns=pay"}));

    // --- A release hands the key to the waiter; the reader leaves: rows follow. ---
    held.release().await.unwrap();
    held_too.release().await.unwrap();
    let next = waiting.await.unwrap().unwrap();
    vera.ok(json!({"op": "waitText", "selector": waits, "text": "0", "timeout": 15000}));
    read.release().await.unwrap();
    vera.ok(json!({"op": "gone", "selector": row(&shared), "timeout": 15000}));

    // --- Neither role: refused at sign-in, and by the API. ---
    let mut carol = Browser::start(url, 1280, 800);
    let refused = carol.ok(json!({"op": "signin", "user": "carol"}));
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.contains("lacks the lock-operator role")),
        "{refused}"
    );
    let carol_rows = carol.ok(json!({"op": "get", "path": "/explorer/rows?ns=pay"}));
    assert_eq!(carol_rows["status"], 401);
    let carol_token = idp.sign_in("carol").await.unwrap();
    let status = http
        .get(format!("{url}/v1/explorer/holds?namespace=pay"))
        .bearer_auth(&carol_token)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 403);
    // A viewer's token files nothing through the API either.
    let status = http
        .post(format!("{url}/v1/requests"))
        .bearer_auth(&vera_token)
        .json(&json!({"key": fair, "reason": "a viewer trying to act", "revoke_session": false}))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 403);

    // --- An operator files a force release from the key's page. ---
    let mut alice = Browser::start(url, 1280, 900);
    alice.ok(json!({"op": "signin", "user": "alice"}));
    alice.ok(json!({"op": "open", "path": format!("/explorer/key?key={fair}")}));
    alice.ok(json!({"op": "wait", "selector": "#file-force-release"}));
    alice.shot("explorer-key.png");
    alice
        .ok(json!({"op": "fill", "selector": "#reason", "text": "the batch job is wedged (test)"}));
    let filed = alice.ok(json!({"op": "click", "selector": "#file-force-release"}));
    assert!(
        filed["url"].as_str().unwrap_or("").contains("/?filed="),
        "{filed}"
    );
    let approvals = alice.html();
    assert!(
        approvals.contains("another operator must approve it"),
        "{approvals}"
    );
    assert!(
        approvals.contains(&fair),
        "the request is pending: {approvals}"
    );
    alice.shot("explorer-filed.png");
    next.release().await.unwrap();
}
