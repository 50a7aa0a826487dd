//! The explorer page (issue 36): what is held now, for the people who get paged. The read
//! model is `lock-explorer` over this server's etcd credential; the markup is
//! `explorer_page` (pure). Reading needs a signed-in person with the viewer or operator
//! role; filing a force release from a key's page needs the operator role and opens the
//! existing two-person flow (another operator approves it on the approvals page).
//!
//! ```text
//! GET  /explorer[?ns=NS[&after=CURSOR][&filter=TEXT]]   namespaces, or a page of holds
//! GET  /explorer/rows?...        the same page's live section (the script re-reads it)
//! GET  /explorer/key?key=KEY     one key: each hold, its queue, the force-release form
//! POST /explorer/file            file a force release (operator, CSRF token)
//! GET  /v1/explorer/holds?namespace=NS[&after=][&limit=]   JSON, bearer ID token
//! GET  /assets/style.css, /assets/explorer.js              shipped in the binary
//! ```

use crate::api::{AdminError, Shared, reader};
use crate::explorer_page as html;
use crate::html::Nav;
use crate::oidc::Access;
use crate::page::page_error;
use crate::store::now_ms;
use crate::web_session::WebSession;
use axum::Json;
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use lock_explorer::{MAX_PAGE, ReadError, Row, Rules};
use serde::Deserialize;

/// Rows per page of the explorer.
const PAGE_ROWS: usize = 100;

#[derive(Debug, Default, Deserialize)]
pub struct ExplorerQuery {
    ns: Option<String>,
    after: Option<String>,
    #[serde(default)]
    filter: String,
}

/// A page's live section, or why it could not be read (said on the page, not a 500: the
/// rest of the page and the last rows stay useful).
async fn live(app: &Shared, q: &ExplorerQuery) -> Result<String, ReadError> {
    let etcd = app.store.etcd();
    match q.ns.as_deref().filter(|n| !n.is_empty()) {
        None => {
            let (names, next) =
                lock_explorer::namespaces(etcd, q.after.as_deref(), PAGE_ROWS).await?;
            let mut counted = Vec::with_capacity(names.len());
            for n in names {
                let (held, shared) = lock_explorer::held_count(etcd, &n).await?;
                counted.push((n, held, shared));
            }
            Ok(html::namespaces(&counted, next.as_deref()))
        }
        Some(ns) => {
            let page =
                lock_explorer::page(etcd, ns, q.after.as_deref(), PAGE_ROWS, now_ms()).await?;
            let rows = lock_explorer::rows(&page.seen, &Rules::default());
            Ok(html::holds(
                ns,
                &rows,
                page.next.as_deref(),
                q.filter.trim(),
            ))
        }
    }
}

fn signed_out(nav_title: &str) -> Response {
    Html(crate::html::frame(
        nav_title,
        None,
        Nav::Explorer,
        "<h1>Explorer</h1><p>Sign in with an account that has the viewer or operator role \
         to see what is held now.</p>",
    ))
    .into_response()
}

fn read_failed(e: &ReadError) -> String {
    format!(
        "<p class=\"error\" id=\"read-error\">The store could not be read: {}</p>",
        crate::html::escape(&e.to_string())
    )
}

pub async fn page(
    State(app): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<ExplorerQuery>,
) -> Response {
    let Some(session) = app.page.session(&headers) else {
        return signed_out("Explorer");
    };
    let section = live(&app, &q).await.unwrap_or_else(|e| read_failed(&e));
    let title = match q.ns.as_deref().filter(|n| !n.is_empty()) {
        Some(ns) => format!("Held in {ns}"),
        None => "Namespaces holding keys".to_owned(),
    };
    let body = html::explorer_body(&title, q.ns.as_deref(), &q.filter, &section);
    Html(crate::html::frame(
        &title,
        Some(&session),
        Nav::Explorer,
        &body,
    ))
    .into_response()
}

/// The live section alone: what the page's script swaps in every two seconds.
pub async fn rows(
    State(app): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<ExplorerQuery>,
) -> Response {
    if app.page.session(&headers).is_none() {
        return (StatusCode::UNAUTHORIZED, "sign in again").into_response();
    }
    match live(&app, &q).await {
        Ok(section) => Html(section).into_response(),
        // The script keeps the last rows and says it is stale.
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

#[derive(Deserialize)]
pub struct KeyQuery {
    key: String,
}

pub async fn key(
    State(app): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
) -> Response {
    let Some(session) = app.page.session(&headers) else {
        return signed_out("Explorer");
    };
    let body = match lock_explorer::one_key(app.store.etcd(), &q.key, now_ms()).await {
        Ok(seen) => {
            let rows = lock_explorer::rows(&seen, &Rules::default());
            // Each holding session's keys: one call each, at most a page of readers.
            let mut sessions = std::collections::BTreeMap::new();
            for r in &rows {
                if !sessions.contains_key(&r.session)
                    && let Ok(v) = lock_explorer::session(app.store.etcd(), &r.session).await
                {
                    sessions.insert(r.session.clone(), v);
                }
            }
            let past = history(&app, &q.key).await;
            html::key_detail(&q.key, &rows, &sessions, &past, now_ms(), &session)
        }
        Err(ReadError::Key(k)) => {
            return page_error(StatusCode::BAD_REQUEST, &format!("not a lock key: {k}"));
        }
        Err(e) => read_failed(&e),
    };
    Html(crate::html::frame(
        &q.key,
        Some(&session),
        Nav::Explorer,
        &body,
    ))
    .into_response()
}

/// Rows of a key's history the key's page shows.
const HISTORY_ROWS: i64 = 20;

/// The key's latest audit rows, over a connection of its own (bounded in time: a slow
/// store costs the page its history, never the page).
async fn history(app: &Shared, key: &str) -> html::History {
    let Some(url) = &app.audit_db else {
        return html::History::NotConfigured;
    };
    let read = async {
        let store = lock_audit::store::Postgres::connect_reader(url).await?;
        store.recent(key, HISTORY_ROWS).await
    };
    match tokio::time::timeout(std::time::Duration::from_secs(3), read).await {
        Ok(Ok(rows)) => html::History::Rows(
            rows.into_iter()
                .map(|s| html::HistoryRow {
                    observed_at_ms: u64::try_from(s.observed_at_ms).unwrap_or(0),
                    kind: s.row.kind.as_str().to_owned(),
                    spiffe_id: s.row.spiffe_id,
                    session: s.row.session,
                    class: s.row.class,
                })
                .collect(),
        ),
        Ok(Err(e)) => html::History::Failed(e.to_string()),
        Err(_) => html::History::Failed("no answer within 3 s".into()),
    }
}

#[derive(Deserialize)]
pub struct FileForm {
    key: String,
    reason: String,
    csrf: String,
}

/// Files a force release of the key's hold as the signed-in operator, then shows it on
/// the approvals page (where another operator approves it).
pub async fn file(
    State(app): State<Shared>,
    headers: HeaderMap,
    Form(form): Form<FileForm>,
) -> Response {
    let Some(session) = app.page.session(&headers) else {
        return page_error(StatusCode::UNAUTHORIZED, "sign in first");
    };
    if let Some(refused) = may_not_act(&session, &form.csrf) {
        return page_error(StatusCode::FORBIDDEN, refused);
    }
    match app
        .store
        .file(&form.key, &form.reason, false, &session.operator)
        .await
    {
        Ok(req) => {
            tracing::info!(
                id = %req.id, key = %req.key, requester = %session.operator.subject,
                "force release filed from the explorer"
            );
            Redirect::to(&format!("/?filed={}", req.id)).into_response()
        }
        Err(e) => {
            let e = AdminError::from(e);
            page_error(e.status(), &e.to_string())
        }
    }
}

/// Why this signed-in person may not file (None: they may).
fn may_not_act(session: &WebSession, csrf: &str) -> Option<&'static str> {
    if csrf != session.csrf {
        return Some("the form is stale; reload the page");
    }
    if session.access != Access::Act {
        return Some("filing a force release needs the operator role");
    }
    None
}

#[derive(Deserialize)]
pub struct HoldsQuery {
    namespace: String,
    after: Option<String>,
    limit: Option<usize>,
}

#[derive(serde::Serialize)]
pub struct HoldsPage {
    namespace: String,
    rows: Vec<Row>,
    /// The cursor of the next page (None: the last).
    next: Option<String>,
}

/// The read model as JSON, for scripts: a bearer ID token with either role.
pub async fn api_holds(
    State(app): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<HoldsQuery>,
) -> Result<Json<HoldsPage>, AdminError> {
    reader(&app, &headers).await?;
    let limit = q.limit.unwrap_or(PAGE_ROWS).clamp(1, MAX_PAGE);
    let page = lock_explorer::page(
        app.store.etcd(),
        &q.namespace,
        q.after.as_deref(),
        limit,
        now_ms(),
    )
    .await
    .map_err(|e| match e {
        ReadError::Store(e) => AdminError::Force(crate::store::ForceError::from(e)),
        e => AdminError::BadRequest(e.to_string()),
    })?;
    Ok(Json(HoldsPage {
        namespace: q.namespace,
        rows: lock_explorer::rows(&page.seen, &Rules::default()),
        next: page.next,
    }))
}

pub async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../assets/style.css"),
    )
        .into_response()
}

pub async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("../assets/explorer.js"),
    )
        .into_response()
}
