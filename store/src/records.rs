//! What the store holds, as bytes and as meaning. Pure: no I/O.
//!
//! | module     | owns                                                                      |
//! |------------|---------------------------------------------------------------------------|
//! | `layout`   | the key layout and record encodings                                       |
//! | `hold_end` | why a hold ended, read at its delete (shared by Observe and the audit trail) |
//!
//! May import: `lock_config`. Nothing else of this crate: every other folder builds on it.

pub mod hold_end;
pub mod layout;
