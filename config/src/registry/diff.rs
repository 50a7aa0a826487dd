//! What a registry change does (ADR-24, 11): identities gaining and losing prefixes,
//! namespaces moving region, classes appearing, going, or changing what their keys
//! guarantee. Pure: two validated registries in, a list of changes out, each marked when it
//! weakens a guarantee or widens access, so a review (or CI) can stop on those.
//!
//! | module    | owns                                                                  |
//! |-----------|-----------------------------------------------------------------------|
//! | `change`  | one change: what it is, whether it is risky, its cost, how it reads   |
//! | `compare` | the changes between two registries, or two filter configurations      |

mod change;
mod compare;

pub use change::Change;
pub use compare::{diff, diff_filter};

/// Keepalives per second for `sessions` sessions of a class with `ttl` (one every TTL/3,
/// ADR-10, 11).
pub fn keepalives_per_second(sessions: u64, ttl: u32) -> f64 {
    sessions as f64 * 3.0 / f64::from(ttl.max(1))
}

#[cfg(test)]
mod tests;
