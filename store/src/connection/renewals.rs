//! One etcd LeaseKeepAlive stream per arbiter for every session it renews (issue 18).
//!
//! etcd-client's `LeaseKeeper` renews the one lease it was opened for, so renewing each
//! session on its own stream cost one HTTP/2 stream, one arbiter task and one etcd server
//! goroutine per session (40,000 at the records' scale point). etcd's LeaseKeepAlive is a
//! bidirectional stream of `{ID}` requests answered by `{header, ID, TTL}` responses, in
//! order, for any lease: this module holds one such stream and matches each answer to the
//! oldest pending renewal of its lease.
//!
//! The call is made with tonic directly over its own channel to the same endpoints, with
//! etcd-client's own message types (`pub-response-field`), because etcd-client exposes no
//! way to send another lease's id on an open stream.
//!
//! A stream that breaks (member gone, connection reset) or stays silent past the timeout
//! fails every pending renewal with NO_QUORUM and is reopened by the next renewal; the
//! caller's answer is unchanged from a per-session stream's. Every answer's header passes
//! the seal in the caller (`Sessions::renew`), as before.

use crate::connection::etcd_tls::EtcdTls;
use crate::error::{ConnectError, StoreError, Task};
use etcd_client::LeaseKeepAliveResponse;
use etcd_client::proto::PbLeaseKeepAliveResponse;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};

const PATH: &str = "/etcdserverpb.Lease/LeaseKeepAlive";

/// etcd's `LeaseKeepAliveRequest { int64 ID = 1; }` (api/etcdserverpb/rpc.proto). etcd-client
/// exports the request type only with its `build-server` feature, which would compile
/// etcd's whole server side for one field.
#[derive(Clone, PartialEq, prost::Message)]
struct PbLeaseKeepAliveRequest {
    #[prost(int64, tag = "1")]
    id: i64,
}

/// Renewals queued for the stream task before callers wait for room.
const QUEUE: usize = 4096;

type Reply = oneshot::Sender<Result<LeaseKeepAliveResponse, StoreError>>;

struct Renewal {
    lease: i64,
    reply: Reply,
}

#[derive(Clone)]
pub struct Renewals {
    tx: mpsc::Sender<Renewal>,
    timeout: Duration,
}

impl Renewals {
    /// Starts the stream task (inside a Tokio runtime). `endpoints` as given to the
    /// arbiter (`host:port` or a URL).
    pub fn start(
        endpoints: &[String],
        timeout: Duration,
        tls: Option<&EtcdTls>,
    ) -> Result<Self, StoreError> {
        let mut list = Vec::new();
        for e in endpoints {
            let url = if e.contains("://") {
                e.clone()
            } else {
                format!("http://{e}")
            };
            let endpoint = Endpoint::from_shared(url)
                .map_err(|e| StoreError::from(ConnectError::Endpoint(e)))?
                .connect_timeout(timeout)
                .http2_keep_alive_interval(Duration::from_secs(5))
                .keep_alive_timeout(timeout);
            let endpoint = match tls {
                Some(tls) => endpoint
                    .tls_config(tls.options())
                    .map_err(|e| StoreError::from(ConnectError::Config(e)))?,
                None => endpoint,
            };
            list.push(endpoint);
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(list, rx, timeout));
        Ok(Self { tx, timeout })
    }

    /// Renews `lease` once; bounded by the timeout. The answer's header is not yet checked.
    pub async fn renew(&self, lease: i64) -> Result<LeaseKeepAliveResponse, StoreError> {
        let (reply, answer) = oneshot::channel();
        let asked = async {
            self.tx
                .send(Renewal { lease, reply })
                .await
                .map_err(|_| StoreError::Stopped(Task::Renewals))?;
            answer.await.map_err(|_| StoreError::NoQuorum)?
        };
        match tokio::time::timeout(self.timeout, asked).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::NoQuorum),
        }
    }
}

/// Renewals sent and not yet answered, per lease, oldest first (etcd answers a stream's
/// requests in order), with when the oldest was sent.
#[derive(Default)]
struct Pending {
    by_lease: HashMap<i64, VecDeque<(Instant, Reply)>>,
    count: usize,
}

impl Pending {
    fn push(&mut self, lease: i64, reply: Reply) {
        self.by_lease
            .entry(lease)
            .or_default()
            .push_back((Instant::now(), reply));
        self.count += 1;
    }

    /// The oldest pending renewal of `lease`.
    fn pop(&mut self, lease: i64) -> Option<Reply> {
        let q = self.by_lease.get_mut(&lease)?;
        let (_, reply) = q.pop_front()?;
        if q.is_empty() {
            self.by_lease.remove(&lease);
        }
        self.count -= 1;
        Some(reply)
    }

    fn oldest(&self) -> Option<Instant> {
        self.by_lease
            .values()
            .filter_map(|q| q.front().map(|(t, _)| *t))
            .min()
    }

    /// Fails every pending renewal: the stream they were sent on is gone.
    fn fail_all(&mut self) {
        for (_, q) in self.by_lease.drain() {
            for (_, reply) in q {
                let _ = reply.send(Err(StoreError::NoQuorum));
            }
        }
        self.count = 0;
    }
}

async fn run(endpoints: Vec<Endpoint>, mut rx: mpsc::Receiver<Renewal>, timeout: Duration) {
    let channel = Channel::balance_list(endpoints.into_iter());
    let mut first: Option<Renewal> = None;
    loop {
        let renewal = match first.take() {
            Some(r) => r,
            None => match rx.recv().await {
                Some(r) => r,
                None => return,
            },
        };
        // Open the stream for this renewal.
        let (out, out_rx) = mpsc::channel::<PbLeaseKeepAliveRequest>(QUEUE);
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        let opened = tokio::time::timeout(timeout, async {
            grpc.ready().await.map_err(|e| e.to_string())?;
            grpc.streaming(
                tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(out_rx)),
                PathAndQuery::from_static(PATH),
                tonic_prost::ProstCodec::<PbLeaseKeepAliveRequest, PbLeaseKeepAliveResponse>::default(),
            )
            .await
            .map_err(|s| s.to_string())
        });
        // The request must be queued before the call resolves: etcd sends the response
        // headers only once it has a message to answer.
        let mut pending = Pending::default();
        if out
            .send(PbLeaseKeepAliveRequest { id: renewal.lease })
            .await
            .is_err()
        {
            let _ = renewal.reply.send(Err(StoreError::NoQuorum));
            continue;
        }
        pending.push(renewal.lease, renewal.reply);
        let mut answers = match opened.await {
            Ok(Ok(resp)) => resp.into_inner(),
            Ok(Err(why)) => {
                tracing::warn!(%why, "could not open the etcd keepalive stream");
                pending.fail_all();
                continue;
            }
            Err(_) => {
                pending.fail_all();
                continue;
            }
        };
        // Serve renewals on this stream until it breaks or stalls.
        loop {
            let stall_at = pending.oldest().map(|t| t + timeout);
            tokio::select! {
                next = rx.recv() => match next {
                    Some(r) => {
                        if out.send(PbLeaseKeepAliveRequest { id: r.lease }).await.is_err() {
                            first = Some(r);
                            break;
                        }
                        pending.push(r.lease, r.reply);
                    }
                    None => return,
                },
                answer = answers.message() => match answer {
                    Ok(Some(resp)) => {
                        if let Some(reply) = pending.pop(resp.id) {
                            let _ = reply.send(Ok(LeaseKeepAliveResponse(resp)));
                        }
                    }
                    Ok(None) | Err(_) => break,
                },
                () = sleep_until(stall_at) => break,
            }
        }
        pending.fail_all();
    }
}

/// Sleeps until `at`, or forever when there is nothing to wait for.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_answers_the_oldest_renewal_of_each_lease() {
        let mut p = Pending::default();
        let (a1, mut ra1) = oneshot::channel();
        let (a2, mut ra2) = oneshot::channel();
        let (b1, mut rb1) = oneshot::channel();
        p.push(1, a1);
        p.push(2, b1);
        p.push(1, a2);
        assert_eq!(p.count, 3);
        let _ = p.pop(1).map(|r| r.send(Err(StoreError::Full)));
        assert!(
            ra1.try_recv().is_ok(),
            "the first renewal of lease 1 answered first"
        );
        assert!(ra2.try_recv().is_err());
        assert!(
            p.pop(3).is_none(),
            "an answer for a lease nobody asked about"
        );
        p.fail_all();
        assert_eq!(p.count, 0);
        assert!(matches!(ra2.try_recv(), Ok(Err(StoreError::NoQuorum))));
        assert!(matches!(rb1.try_recv(), Ok(Err(StoreError::NoQuorum))));
    }
}
