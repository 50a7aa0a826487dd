//! The markup lock-admin's pages share (the approval page and the explorer), pure:
//! escaping, the frame with its header bar, and times for people.

use crate::oidc::Access;
use crate::web_session::WebSession;

/// HTML-escapes text from records (keys, reasons and names come from people).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Which page the header marks as current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Explorer,
    Approvals,
}

/// A whole page: the header bar (who is signed in, the two pages), then `body`.
pub fn frame(title: &str, session: Option<&WebSession>, nav: Nav, body: &str) -> String {
    let link = |href: &str, text: &str, here: bool| {
        format!(
            "<a href=\"{href}\"{}>{text}</a>",
            if here { " aria-current=\"page\"" } else { "" }
        )
    };
    let who = match session {
        Some(s) => format!(
            "<span class=\"who\">Signed in as <b id=\"operator\">{}</b> ({}) \
             <form method=\"post\" action=\"/logout\" style=\"display:inline\">\
             <button class=\"quiet\">Sign out</button></form></span>",
            escape(&s.operator.name),
            match s.access {
                Access::Act => "operator",
                Access::View => "viewer: read only",
            }
        ),
        None => "<span class=\"who\"><a id=\"signin\" class=\"button\" href=\"/login\">Sign in</a></span>"
            .to_owned(),
    };
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · lock-admin</title><link rel=\"stylesheet\" href=\"/assets/style.css\">\
         </head><body><header class=\"bar\"><span class=\"brand\">fenced-lock admin</span>\
         <nav>{}{}</nav>{who}</header><main>{body}</main></body></html>",
        link("/explorer", "Explorer", nav == Nav::Explorer),
        link("/", "Force release approvals", nav == Nav::Approvals),
        title = escape(title),
    )
}

/// `2026-12-07 11:02:35 UTC` from milliseconds since the epoch (the date by the
/// registry's own civil-date function).
pub fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let day =
        lock_config::registry::Date::from_unix_days(i64::try_from(secs / 86_400).unwrap_or(0));
    let rem = secs % 86_400;
    format!(
        "{day} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// `12 s`, `3 min 5 s`, `2 h 4 min`: how long ago, for people.
pub fn ago(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// Percent-encodes a query value (keys are path-like: letters, digits, `/`, `-`, `_`, `.`).
pub fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(char::from(b));
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
