//! The in-test fenced resource: a register per key that accepts a write only if its token
//! is not below the highest token it has accepted (the holder of the current grant may
//! write many times), and serves a read (a shared holder's) only under a token at least
//! that one: a reader granted before the last writer was paused while it came and went.
//! Workers reach it over TCP on loopback, one line per call: `W <key> <token>` or
//! `R <key> <token>`, answered `OK` or `STALE`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, TcpStream};

pub struct Register {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Register {
    pub async fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let fences: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(serve(conn, fences.clone()));
            }
        });
        Ok(Self { addr, task })
    }
}

impl Drop for Register {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(conn: TcpStream, fences: Arc<Mutex<HashMap<String, u64>>>) {
    let (read, mut write) = conn.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let mut parts = line.split_whitespace();
        let answer = match (
            parts.next(),
            parts.next(),
            parts.next().map(str::parse::<u64>),
        ) {
            (Some(op @ ("W" | "R")), Some(key), Some(Ok(token))) => {
                let Ok(mut f) = fences.lock() else { return };
                let current = f.entry(key.to_owned()).or_insert(0);
                if token < *current {
                    "STALE\n"
                } else {
                    if op == "W" {
                        *current = token;
                    }
                    "OK\n"
                }
            }
            _ => "ERR\n",
        };
        if write.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// A worker's connection to the register.
pub struct RegisterClient {
    lines: tokio::io::Lines<BufReader<tokio::net::tcp::OwnedReadHalf>>,
    write: tokio::net::tcp::OwnedWriteHalf,
}

impl RegisterClient {
    pub async fn connect(addr: SocketAddr) -> anyhow::Result<Self> {
        let (read, write) = TcpStream::connect(addr).await?.into_split();
        Ok(Self {
            lines: BufReader::new(read).lines(),
            write,
        })
    }

    /// Ok(true): accepted; Ok(false): refused as stale.
    pub async fn write(&mut self, key: &str, token: u64) -> anyhow::Result<bool> {
        self.call("W", key, token).await
    }

    /// Ok(true): served; Ok(false): refused as stale (a write under a later token came
    /// first).
    pub async fn read(&mut self, key: &str, token: u64) -> anyhow::Result<bool> {
        self.call("R", key, token).await
    }

    async fn call(&mut self, op: &str, key: &str, token: u64) -> anyhow::Result<bool> {
        self.write
            .write_all(format!("{op} {key} {token}\n").as_bytes())
            .await?;
        match self.lines.next_line().await?.as_deref() {
            Some("OK") => Ok(true),
            Some("STALE") => Ok(false),
            other => anyhow::bail!("register answered {other:?}"),
        }
    }
}
