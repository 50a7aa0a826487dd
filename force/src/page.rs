//! The approval page: signed-in operators see pending force releases and approve them in
//! a browser. The sign-in itself is `sign_in.rs` (routes) and `web_session.rs` (state).
//!
//! ```text
//! GET  /             pending requests (holder, age, class, enforcement, warning, reason)
//! POST /approve/{id} approve as the signed-in operator (CSRF token; never the requester)
//! ```
//!
//! Rendering is pure ([`render_index`], tested).

use crate::api::{Listing, Shared, execute, listing};
use crate::html::{Nav, escape, frame};
use crate::store::now_ms;
use crate::web_session::WebSession;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;

fn age(since_ms: u64, now_ms: u64) -> String {
    let s = now_ms.saturating_sub(since_ms) / 1000;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// The page (pure): who is signed in, what is pending, what was done.
pub fn render_index(
    session: Option<&WebSession>,
    listing: &Listing,
    now_ms: u64,
    notice: Option<&str>,
) -> String {
    let mut h = String::from("<h1>Force release approvals</h1>");
    if session.is_none() {
        h.push_str("<p>Sign in with your operator account to see and approve force releases.</p>");
        return frame("Force release approvals", None, Nav::Approvals, &h);
    }
    if let Some(n) = notice {
        h.push_str(&format!(
            "<p class=\"notice\" id=\"notice\">{}</p>",
            escape(n)
        ));
    }
    h.push_str("<h2>Pending</h2>");
    if listing.pending.is_empty() {
        h.push_str("<p id=\"none-pending\">No request is waiting.</p>");
    }
    for p in &listing.pending {
        let r = &p.request;
        h.push_str(&format!(
            "<div class=\"request card\" id=\"request-{id}\"><h3>{key}</h3><table class=\"fields\">\
             <tr><th>Holder</th><td>{holder}</td></tr>\
             <tr><th>Session</th><td>{session}</td></tr>\
             <tr><th>Held for</th><td>{held}</td></tr>\
             <tr><th>Class</th><td>{class}</td></tr>\
             <tr><th>Enforcement</th><td class=\"enforcement\">{enf}</td></tr>\
             <tr><th>Reason</th><td>{reason}</td></tr>\
             <tr><th>Requested by</th><td>{req} ({reqsub}), {filed} ago</td></tr>\
             <tr><th>Also revoke the session</th><td>{revoke}</td></tr></table>",
            id = escape(&r.id),
            key = escape(&r.key),
            holder = escape(&r.hold.spiffe_id),
            session = escape(&r.hold.session),
            held = age(r.hold.acquired_at_ms, now_ms),
            class = escape(&r.hold.class),
            enf = escape(&r.enforcement),
            reason = escape(&r.reason),
            req = escape(&r.requester.name),
            reqsub = escape(&r.requester.subject),
            filed = age(r.filed_at_ms, now_ms),
            revoke = if r.revoke_session {
                "yes: every hold of this session ends"
            } else {
                "no"
            },
        ));
        if let Some(w) = &p.warning {
            h.push_str(&format!("<p class=\"warn\">{}</p>", escape(w)));
        }
        match session {
            Some(s) if s.operator.same_person(&r.requester) => h.push_str(
                "<p class=\"own\">Your request: another operator must approve it.</p>",
            ),
            Some(s) if s.access != crate::oidc::Access::Act => h.push_str(
                "<p class=\"own\">Approving needs the operator role; you may read.</p>",
            ),
            Some(s) => h.push_str(&format!(
                "<form method=\"post\" action=\"/approve/{id}\">\
                 <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
                 <button class=\"approve\" id=\"approve-{id}\">Approve force release</button></form>",
                id = escape(&r.id),
                csrf = escape(&s.csrf)
            )),
            None => {}
        }
        h.push_str("</div>");
    }
    h.push_str("<h2>Executed (last 24 h)</h2>");
    if listing.executed.is_empty() {
        h.push_str("<p>None.</p>");
    } else {
        h.push_str(
            "<div class=\"scroll\"><table id=\"executed\"><tr><th>Key</th><th>Requested by</th><th>Approved by</th>\
             <th>Enforcement</th><th>Reason</th><th>When</th></tr>",
        );
        for r in &listing.executed {
            h.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} ago</td></tr>",
                escape(&r.key),
                escape(&r.requester.name),
                escape(&r.approver.name),
                escape(&r.enforcement),
                escape(&r.reason),
                age(r.executed_at_ms, now_ms)
            ));
        }
        h.push_str("</table></div>");
    }
    frame("Force release approvals", session, Nav::Approvals, &h)
}

pub(crate) fn page_error(status: StatusCode, message: &str) -> Response {
    (
        status,
        Html(frame(
            "Refused",
            None,
            Nav::Approvals,
            &format!(
                "<h1>Refused</h1><p class=\"error\" id=\"error\">{}</p>\
                 <p><a href=\"/\">Back</a></p>",
                escape(message)
            ),
        )),
    )
        .into_response()
}

#[derive(Deserialize)]
pub struct IndexQuery {
    done: Option<String>,
    filed: Option<String>,
}

pub async fn index(
    State(app): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<IndexQuery>,
) -> Response {
    let session = app.page.session(&headers);
    let listing = match session {
        Some(_) => match listing(&app.store).await {
            Ok(l) => l,
            Err(e) => return page_error(e.status(), &e.to_string()),
        },
        None => Listing {
            pending: Vec::new(),
            executed: Vec::new(),
        },
    };
    let notice = match (q.done, q.filed) {
        (Some(id), _) => Some(format!("Force release {id} executed.")),
        (None, Some(id)) => Some(format!(
            "Force release {id} filed: another operator must approve it."
        )),
        (None, None) => None,
    };
    Html(render_index(
        session.as_ref(),
        &listing,
        now_ms(),
        notice.as_deref(),
    ))
    .into_response()
}

#[derive(Deserialize)]
pub struct ApproveForm {
    csrf: String,
}

pub async fn approve(
    State(app): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ApproveForm>,
) -> Response {
    let Some(session) = app.page.session(&headers) else {
        return page_error(StatusCode::UNAUTHORIZED, "sign in first");
    };
    if form.csrf != session.csrf {
        return page_error(StatusCode::FORBIDDEN, "the form is stale; reload the page");
    }
    if session.access != crate::oidc::Access::Act {
        return page_error(StatusCode::FORBIDDEN, "approving needs the operator role");
    }
    match execute(&app, &id, &session.operator).await {
        Ok(done) => {
            let mut msg = format!("/?done={}", done.executed.record.id);
            if done.executed.session_revoke_error.is_some() {
                msg.push_str("&revoke=failed");
            }
            Redirect::to(&msg).into_response()
        }
        Err(e) => page_error(e.status(), &e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Pending;
    use crate::oidc::Operator;
    use crate::request::{ForceRequest, HoldView, warning};

    fn op(sub: &str) -> Operator {
        Operator {
            issuer: "i".into(),
            subject: sub.into(),
            name: format!("{sub} <b>"),
        }
    }

    fn listing(enforcement: &str) -> Listing {
        Listing {
            pending: vec![Pending {
                request: ForceRequest {
                    id: "abc".into(),
                    key: "pay/<script>".into(),
                    reason: "stuck & leaking".into(),
                    revoke_session: false,
                    requester: op("alice"),
                    filed_at_ms: 1_000,
                    expires_at_ms: 9_999_999,
                    hold: HoldView {
                        revision: 4,
                        spiffe_id: "spiffe://td/ns/pay/sa/w".into(),
                        session: "69".into(),
                        class: "ledger".into(),
                        acquired_at_ms: 0,
                    },
                    enforcement: enforcement.into(),
                },
                warning: warning(enforcement).map(str::to_owned),
            }],
            executed: Vec::new(),
        }
    }

    fn session(sub: &str) -> WebSession {
        WebSession {
            operator: op(sub),
            access: crate::oidc::Access::Act,
            expires_at: u64::MAX,
            csrf: "tok".into(),
        }
    }

    #[test]
    fn page_table() {
        let signed_out = render_index(None, &listing("fenced"), 0, None);
        assert!(signed_out.contains("id=\"signin\"") && !signed_out.contains("pay/"));

        let bob = render_index(Some(&session("bob")), &listing("advisory"), 125_000, None);
        assert!(
            bob.contains("id=\"approve-abc\""),
            "another operator may approve"
        );
        assert!(bob.contains("two writers"), "advisory warning shown");
        assert!(bob.contains("2 min"), "hold age shown");
        let mut vera = session("vera");
        vera.access = crate::oidc::Access::View;
        let viewer = render_index(Some(&vera), &listing("advisory"), 125_000, None);
        assert!(
            !viewer.contains("id=\"approve-abc\"") && viewer.contains("needs the operator role"),
            "a viewer reads, approves nothing"
        );
        assert!(
            bob.contains("pay/&lt;script&gt;") && !bob.contains("<script>"),
            "escaped"
        );
        assert!(bob.contains("bob &lt;b&gt;"), "names escaped");

        let alice = render_index(Some(&session("alice")), &listing("fenced"), 0, None);
        assert!(
            !alice.contains("approve-abc"),
            "no approve button for the requester"
        );
        assert!(alice.contains("another operator must approve"));
        assert!(!alice.contains("class=\"warn\""), "fenced: no warning");
    }
}
