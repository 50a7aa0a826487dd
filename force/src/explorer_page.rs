//! The explorer's HTML (issue 36), pure: the read model's rows in, markup out. Shared by
//! the page (`explorer.rs`), its live section (re-read every two seconds by the shipped
//! script) and the approval page's frame (`html::frame`). Every text from the store or from
//! people is escaped; no token is ever among the inputs.

use crate::html::{ago, escape, query_escape, utc};
use crate::oidc::Access;
use crate::web_session::WebSession;
use lock_explorer::{Flag, Mode, Row, SessionView};
use std::collections::BTreeMap;

/// A hold's state by word and colour: a flag first (the reason to look), else whether
/// anyone waits, else plainly held.
pub fn state(r: &Row) -> String {
    if !r.flags.is_empty() {
        let words: Vec<&str> = r.flags.iter().map(Flag::word).collect();
        return format!(
            "<span class=\"state state-bad\">{}</span>",
            escape(&words.join(", "))
        );
    }
    let waiting = r.durable_waiters + u64::from(r.writer_waiting);
    match waiting {
        0 if r.mode == Mode::Shared => "<span class=\"state state-held\">read</span>".into(),
        0 => "<span class=\"state state-held\">held</span>".into(),
        n => format!("<span class=\"state state-queued\">held, {n} waiting</span>"),
    }
}

fn when(r: &Row) -> String {
    format!(
        "<time title=\"{abs}\">{} ago</time><br><span class=\"muted wide\">{abs}</span>",
        ago(r.held_for_ms),
        abs = utc(r.acquired_at_ms)
    )
}

fn ttl(r: &Row) -> String {
    match (r.ttl_left_s, r.session_ttl_s) {
        (Some(left), Some(of)) => format!("{left} s of {of} s"),
        (Some(left), None) => format!("{left} s"),
        (None, _) => "<span class=\"state state-bad\">gone</span>".into(),
    }
}

fn key_link(key: &str) -> String {
    format!(
        "<a href=\"/explorer/key?key={}\">{}</a>",
        escape(&query_escape(key)),
        escape(key)
    )
}

/// The live section of the namespaces list.
pub fn namespaces(names: &[(String, u64, u64)], next: Option<&str>) -> String {
    if names.is_empty() {
        return "<p id=\"no-holds\">No namespace holds a key.</p>".into();
    }
    let mut h = String::from(
        "<div class=\"scroll\"><table id=\"namespaces\"><thead><tr><th>Namespace</th>\
         <th class=\"num\">Held</th><th class=\"num\">Shared</th></tr></thead><tbody>",
    );
    for (ns, held, shared) in names {
        h.push_str(&format!(
            "<tr data-namespace=\"{n}\"><td><a href=\"/explorer?ns={q}\">{n}</a></td>\
             <td class=\"num\">{held}</td><td class=\"num\">{shared}</td></tr>",
            n = escape(ns),
            q = escape(&query_escape(ns)),
        ));
    }
    h.push_str("</tbody></table></div>");
    if let Some(n) = next {
        h.push_str(&format!(
            "<p class=\"pager\"><a href=\"/explorer?after={}\">More namespaces</a></p>",
            escape(&query_escape(n))
        ));
    }
    h
}

/// The live section of one namespace's page of holds.
pub fn holds(ns: &str, rows: &[Row], next: Option<&str>, filter: &str) -> String {
    let shown: Vec<&Row> = rows
        .iter()
        .filter(|r| filter.is_empty() || r.key.contains(filter) || r.identity.contains(filter))
        .collect();
    let mut h = format!(
        "<p id=\"hold-count\">{} hold(s) on this page of <b>{}</b>{}</p>",
        shown.len(),
        escape(ns),
        if filter.is_empty() {
            String::new()
        } else {
            format!(" matching <code>{}</code>", escape(filter))
        }
    );
    if shown.is_empty() {
        h.push_str("<p id=\"no-holds\">Nothing held here now.</p>");
    } else {
        h.push_str(
            "<div class=\"scroll\"><table id=\"holds\"><thead><tr><th>Key</th><th>State</th>\
             <th>Mode</th><th>Holder</th><th class=\"wide\">Instance</th><th>Held for</th>\
             <th>TTL left</th><th class=\"num\">Waiting</th></tr></thead><tbody>",
        );
        for r in shown {
            h.push_str(&format!(
                "<tr data-key=\"{key}\" data-mode=\"{mode}\"><td class=\"key\">{link}\
                 <br><span class=\"muted\">{class}</span></td>\
                 <td>{state}</td><td>{mode}</td><td class=\"who\">{who}</td>\
                 <td class=\"wide nowrap\" title=\"{inst}\">{short}</td>\
                 <td class=\"nowrap\">{when}</td><td class=\"nowrap\">{ttl}</td>\
                 <td class=\"num nowrap waiters\">{wait}</td></tr>",
                key = escape(&r.key),
                link = key_link(&r.key),
                state = state(r),
                mode = r.mode.word(),
                who = escape(&r.identity),
                inst = escape(r.instance.as_deref().unwrap_or("-")),
                short = escape(&short(r.instance.as_deref().unwrap_or("-"))),
                when = when(r),
                ttl = ttl(r),
                wait = waiting(r),
                class = escape(&r.class),
            ));
        }
        h.push_str("</tbody></table></div>");
    }
    if let Some(n) = next {
        h.push_str(&format!(
            "<p class=\"pager\"><a id=\"next-page\" href=\"/explorer?ns={}&amp;after={}\">Next page</a></p>",
            escape(&query_escape(ns)),
            escape(&query_escape(n))
        ));
    }
    h
}

/// An instance as a column shows it: a pod name whole, a generated id cut (the cell's
/// title and the key's page have it whole).
fn short(instance: &str) -> String {
    match instance.char_indices().nth(10) {
        Some((i, _)) => format!("{}…", &instance[..i]),
        None => instance.to_owned(),
    }
}

/// Durable waiters; for a shared key, its readers and whether a writer waits.
fn waiting(r: &Row) -> String {
    if r.mode == Mode::Shared || r.shared_holders > 0 || r.writer_waiting {
        format!(
            "{} reader(s){}",
            r.shared_holders,
            if r.writer_waiting {
                ", a writer waits"
            } else {
                ""
            }
        )
    } else {
        r.durable_waiters.to_string()
    }
}

/// One row of a key's audit history, as the key's page shows it (no revision: a token
/// is made of one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRow {
    pub observed_at_ms: u64,
    pub kind: String,
    pub spiffe_id: String,
    pub session: String,
    pub class: String,
}

/// What the audit store said about the key: not configured, unreadable, or its rows.
#[derive(Debug, Clone)]
pub enum History {
    NotConfigured,
    Failed(String),
    Rows(Vec<HistoryRow>),
}

fn history(key: &str, h: &History, now_ms: u64) -> String {
    let mut out = String::from("<h2>Recent history</h2>");
    match h {
        History::NotConfigured => out.push_str(&format!(
            "<p class=\"muted\" id=\"history-off\">lock-admin has no audit store \
             (<code>--audit-db</code>): <code>lockctl audit {}</code>.</p>",
            escape(key)
        )),
        History::Failed(e) => out.push_str(&format!(
            "<p class=\"error\" id=\"history-error\">The audit store could not be read: {}</p>",
            escape(e)
        )),
        History::Rows(rows) if rows.is_empty() => {
            out.push_str("<p class=\"muted\" id=\"history-none\">No rows yet.</p>");
        }
        History::Rows(rows) => {
            out.push_str(
                "<div class=\"scroll\"><table id=\"history\"><thead><tr><th>When</th>\
                 <th>What</th><th>Who</th><th class=\"wide\">Session</th><th class=\"wide\">Class</th>\
                 </tr></thead><tbody>",
            );
            for r in rows {
                out.push_str(&format!(
                    "<tr><td class=\"nowrap\"><time title=\"{abs}\">{ago} ago</time></td>\
                     <td class=\"kind\">{kind}</td><td>{who}</td><td class=\"wide\">{session}</td>\
                     <td class=\"wide\">{class}</td></tr>",
                    abs = utc(r.observed_at_ms),
                    ago = ago(now_ms.saturating_sub(r.observed_at_ms)),
                    kind = escape(&r.kind),
                    who = escape(&r.spiffe_id),
                    session = escape(&r.session),
                    class = escape(&r.class),
                ));
            }
            out.push_str("</tbody></table></div>");
        }
    }
    out
}

/// One key's detail: each hold on it, its queue, its recent history, and the way to a
/// force release.
pub fn key_detail(
    key: &str,
    rows: &[Row],
    sessions: &BTreeMap<String, SessionView>,
    past: &History,
    now_ms: u64,
    session: &WebSession,
) -> String {
    let mut h = format!("<h1>{}</h1>", escape(key));
    if rows.is_empty() {
        h.push_str("<p id=\"not-held\" class=\"notice\">Nobody holds this key now.</p>");
    }
    for r in rows {
        let flags = if r.flags.is_empty() {
            "none".to_owned()
        } else {
            r.flags
                .iter()
                .map(Flag::explain)
                .collect::<Vec<_>>()
                .join("; ")
        };
        h.push_str(&format!(
            "<div class=\"card hold\"><h3>{mode} hold {state}</h3><table class=\"fields\">\
             <tr><th>Holder</th><td>{who}</td></tr>\
             <tr><th>Instance</th><td>{inst}</td></tr>\
             <tr><th>Class</th><td>{class}</td></tr>\
             <tr><th>Acquired</th><td>{abs} ({ago} ago, by its arbiter's clock)</td></tr>\
             <tr><th>Session</th><td>{session}, TTL left {ttl}</td></tr>\
             <tr><th>Waiting</th><td class=\"waiters\">{wait}</td></tr>\
             <tr><th>Flags</th><td>{flags}</td></tr>\
             <tr><th>Its session also</th><td class=\"session-keys\">{also}</td></tr></table></div>",
            mode = r.mode.word(),
            state = state(r),
            who = escape(&r.identity),
            inst = escape(r.instance.as_deref().unwrap_or("(not sent)")),
            class = escape(&r.class),
            abs = utc(r.acquired_at_ms),
            ago = ago(r.held_for_ms),
            session = escape(&r.session),
            ttl = ttl(r),
            wait = waiting(r),
            flags = escape(&flags),
            also = session_keys(key, sessions.get(&r.session)),
        ));
    }
    h.push_str(&history(key, past, now_ms));
    h.push_str(&format!(
        "<p class=\"muted\">From a terminal: <code>lockctl inspect {k}</code>, \
         <code>lockctl audit {k}</code>.</p>",
        k = escape(key)
    ));
    let exclusive = rows.iter().any(|r| r.mode == Mode::Exclusive);
    match session.access {
        Access::Act if exclusive => h.push_str(&format!(
            "<div class=\"card\"><h2>File a force release</h2>\
             <p>Another operator must approve it on the approvals page. The holder's \
             session stays open; only this hold ends.</p>\
             <form method=\"post\" action=\"/explorer/file\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <input type=\"hidden\" name=\"key\" value=\"{k}\">\
             <label for=\"reason\">Reason (kept in the audit trail)</label>\
             <textarea id=\"reason\" name=\"reason\" rows=\"2\" required minlength=\"10\"></textarea>\
             <p><button id=\"file-force-release\">File force release</button></p></form></div>",
            csrf = escape(&session.csrf),
            k = escape(key)
        )),
        Access::Act => {}
        Access::View => h.push_str(
            "<p class=\"muted\">Filing a force release needs the operator role.</p>",
        ),
    }
    h
}

/// The holding session's other keys: what a force release with the session revoked
/// would end, and what the session waits for.
fn session_keys(key: &str, view: Option<&SessionView>) -> String {
    let Some(v) = view else {
        return "<span class=\"muted\">not read</span>".into();
    };
    let links = |keys: Vec<&String>| {
        keys.iter()
            .map(|k| key_link(k))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let held: Vec<&String> = v
        .holds
        .iter()
        .map(|(k, _)| k)
        .filter(|k| *k != key)
        .collect();
    let waiting: Vec<&String> = v.waiting.iter().collect();
    let mut out = match held.len() {
        0 => "holds nothing else".to_owned(),
        n => format!("holds {n} other key(s): {}", links(held)),
    };
    if !waiting.is_empty() {
        out.push_str(&format!("; waits for {}", links(waiting)));
    }
    if v.more {
        out.push_str(" (and more)");
    }
    out
}

/// The explorer page around its live section: the filter form, the live status, and the
/// shipped script that re-reads the section.
pub fn explorer_body(title: &str, ns: Option<&str>, filter: &str, live: &str) -> String {
    let form = match ns {
        Some(ns) => format!(
            "<form method=\"get\" action=\"/explorer\" class=\"pager\" role=\"search\">\
             <input type=\"hidden\" name=\"ns\" value=\"{}\">\
             <label for=\"filter\" class=\"muted\" style=\"margin:0\">Filter keys or holders</label>\
             <input type=\"text\" id=\"filter\" name=\"filter\" value=\"{}\" style=\"max-width:20em\">\
             <button class=\"quiet\">Filter</button> <a href=\"/explorer\">All namespaces</a></form>",
            escape(ns),
            escape(filter)
        ),
        None => String::new(),
    };
    format!(
        "<h1>{}</h1>{form}<p id=\"live-status\" class=\"live\" role=\"status\">live: updated \
         every 2 s</p><section id=\"live\" aria-live=\"polite\">{live}</section>\
         <script src=\"/assets/explorer.js\"></script>",
        escape(title)
    )
}

#[cfg(test)]
mod tests;
