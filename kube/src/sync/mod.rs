//! `lock-registry-sync` (ADR-24): the registry's custom resources in one namespace, written
//! to the folder the arbiters' `--registry` reads — only when the whole set passes the
//! registry's one validation; otherwise the folder keeps the last good set and the refusal
//! is logged and counted.
//!
//! - [`decide`]: which set to write — a pure function of the objects held, the folder's
//!   current text and the date (table-tested);
//! - [`folder`]: the folder's one file, replaced atomically (temp file + rename);
//! - [`run`]: the rim — kube client, one watch + reflector per kind, the loop;
//! - [`metrics`] and [`admin`]: `/metrics` and `/healthz` on `--admin-listen`.

pub mod admin;
pub mod decide;
pub mod folder;
pub mod metrics;
pub mod run;
