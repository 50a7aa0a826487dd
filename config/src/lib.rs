//! The shared vocabulary of the fenced lock service.
//!
//! Keys (DESIGN 4.1), fencing tokens (4.3), the error contract (4.4), SPIFFE IDs, the
//! registry documents (5), the compiled authoriser and the edge filter's configuration, and
//! the `lock.v1` prost types. Pure: no I/O but parsing; builds for native and wasm32-wasip1.
//!
//! ```
//! use lock_config::{FencingToken, LockKey};
//! let key = LockKey::parse("pay/ledger/42").unwrap();
//! assert_eq!(key.namespace(), "pay");
//! let token = FencingToken::pack(1, 1234).unwrap();
//! assert_eq!(token.as_u64(), (1u64 << 48) | 1234);
//! ```

pub mod authz;
pub mod ecds;
pub mod edge_headers;
pub mod filter_config;
pub mod identity;
pub mod instance;
pub mod key;
pub mod key_set;
pub mod proto;
pub mod reason;
pub mod registry;
pub mod shards;
pub mod status_details;
pub mod token;

pub use authz::Authoriser;
pub use filter_config::{CompiledFilterConfig, FilterConfig};
pub use identity::SpiffeId;
pub use key::{KeyError, KeyPrefix, LockKey};
pub use key_set::{KeySet, KeySetError, MAX_SET_KEYS};
pub use reason::{ERROR_DOMAIN, GrpcCode, Reason};
pub use registry::Registry;
pub use token::FencingToken;
