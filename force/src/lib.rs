//! Two-person force release (ADR-20, issue 22): a leaked lock (holder alive, renewing,
//! never releasing) is cleared by one operator filing a request with a reason and a
//! second approving it, both signed in at the organisation's IdP with MFA.
//!
//! A walk: `api.rs`/`page.rs` (who asks: `oidc.rs`; a browser signs in through
//! `sign_in.rs`, its session kept by `web_session.rs`) → `request.rs` (may they: pure) →
//! `store.rs` (one etcd Txn that re-checks the hold). `server.rs` puts the routes on their
//! own listener; `client.rs` is `lockctl force-release`.
//!
//! The two-person epoch advance (ADR-03) runs here too, under the same sign-in rules:
//! `advance.rs` (pure) → `advance_store.rs` (the compare-and-advance Txn with the
//! request's compare and delete in it); `lockctl epoch advance request|approve|list`.

pub mod advance;
pub mod advance_store;
pub mod api;
pub mod client;
pub mod explorer;
pub mod explorer_page;
pub mod html;
pub mod oidc;
pub mod page;
pub mod request;
pub mod server;
pub mod sign_in;
pub mod store;
pub mod web_session;
