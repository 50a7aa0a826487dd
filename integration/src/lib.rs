//! Process harness for end-to-end tests and `make run`: real etcd, real arbiters, real
//! Envoy with the built filter, dev SVIDs. Random loopback ports, temp folders, readiness
//! waits bounded in time, cleanup on drop.

pub mod arbiter;
pub mod envoy;
pub mod etcd;
pub mod paths;
pub mod pki;
pub mod process;
pub mod raw;
pub mod registry;
pub mod stack;

pub use stack::{Stack, StackOptions};

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// GET on Envoy's admin endpoint (plain HTTP/1.0, so the body ends at close).
pub fn admin_get(admin: SocketAddr, path: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect_timeout(&admin, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: admin\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or(out))
}
