//! The `lock.v1.Lock` gRPC service: adapts requests to the engine and errors to statuses.
//!
//! The caller's identity is the `x-lock-identity` header the edge filter set from the
//! verified peer certificate, read from the request's initial headers only (`edge`), on a
//! connection whose peer is an allow-listed edge identity (`peer_tls`).

use crate::ops::traces;
use crate::serve::calls;
use crate::serve::edge::EdgeContext;
use crate::serve::engine::Engine;
use crate::serve::keepalive;
use crate::serve::proto::lock_server::Lock;
use lock_config::FencingToken;
use lock_config::edge_headers::ARBITER_HEADER;
use lock_config::proto::v1::*;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use tokio_stream::Stream;
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument as _;

pub struct LockService {
    engine: Arc<Engine>,
    arbiter_id: MetadataValue<tonic::metadata::Ascii>,
}

impl LockService {
    pub fn new(engine: Arc<Engine>, arbiter_id: &str) -> Self {
        let arbiter_id = MetadataValue::try_from(arbiter_id)
            .unwrap_or_else(|_| MetadataValue::from_static("arbiter"));
        Self { engine, arbiter_id }
    }

    fn edge<T>(&self, req: &Request<T>) -> EdgeContext {
        EdgeContext::of(req, self.engine.bugs())
    }

    fn reply<T>(&self, msg: T) -> Response<T> {
        let mut r = Response::new(msg);
        r.metadata_mut()
            .insert(ARBITER_HEADER, self.arbiter_id.clone());
        r
    }
}

type KeepAliveStream = Pin<Box<dyn Stream<Item = Result<KeepAliveResponse, Status>> + Send>>;
type HoldStream = Pin<Box<dyn Stream<Item = Result<HoldResponse, Status>> + Send>>;
type ObserveStream = Pin<Box<dyn Stream<Item = Result<ObserveResponse, Status>> + Send>>;

/// The calls themselves; the trait below times each one (`observed`).
impl LockService {
    async fn open_session_call(
        &self,
        req: Request<OpenSessionRequest>,
    ) -> Result<Response<OpenSessionResponse>, Status> {
        let edge = self.edge(&req);
        let who = edge.identity()?;
        let key = edge.keyed(&req.get_ref().key)?;
        let instance = edge.instance()?;
        // Debug-only bug: sessions forget their instance, so the leak rule is by identity.
        let instance = instance.filter(|_| {
            !self
                .engine
                .bugs()
                .has(crate::ops::bugs::Bug::LeakByIdentity)
        });
        let (session, class) = self.engine.open_session(&who, instance, &key).await?;
        tracing::debug!(namespace = key.namespace(), class, "session opened");
        Ok(self.reply(OpenSessionResponse {
            session_id: session.lease,
            ttl_seconds: session.ttl_seconds,
            class_name: class,
        }))
    }

    async fn close_session_call(
        &self,
        req: Request<CloseSessionRequest>,
    ) -> Result<Response<CloseSessionResponse>, Status> {
        let who = self.edge(&req).identity()?;
        self.engine
            .close_session(&who, req.get_ref().session_id)
            .await?;
        Ok(self.reply(CloseSessionResponse {}))
    }

    async fn acquire_call(
        &self,
        req: Request<AcquireRequest>,
    ) -> Result<Response<AcquireResponse>, Status> {
        let edge = self.edge(&req);
        Ok(self.reply(calls::acquire(&self.engine, &edge, req.get_ref()).await?))
    }

    async fn release_call(
        &self,
        req: Request<ReleaseRequest>,
    ) -> Result<Response<ReleaseResponse>, Status> {
        let edge = self.edge(&req);
        Ok(self.reply(calls::release(&self.engine, &edge, req.get_ref()).await?))
    }

    async fn acquire_all_call(
        &self,
        req: Request<AcquireAllRequest>,
    ) -> Result<Response<AcquireAllResponse>, Status> {
        let edge = self.edge(&req);
        Ok(self.reply(calls::acquire_all(&self.engine, &edge, req.get_ref()).await?))
    }

    async fn release_all_call(
        &self,
        req: Request<ReleaseAllRequest>,
    ) -> Result<Response<ReleaseAllResponse>, Status> {
        let edge = self.edge(&req);
        Ok(self.reply(calls::release_all(&self.engine, &edge, req.get_ref()).await?))
    }

    async fn validate_token_call(
        &self,
        req: Request<ValidateTokenRequest>,
    ) -> Result<Response<ValidateTokenResponse>, Status> {
        let edge = self.edge(&req);
        edge.identity()?;
        let key = edge.keyed(&req.get_ref().key)?;
        // A value no grant could have produced is simply not valid.
        let valid = match FencingToken::from_u64(req.get_ref().token) {
            Ok(token) => self.engine.validate(&key, token).await?,
            Err(_) => false,
        };
        Ok(self.reply(ValidateTokenResponse { valid }))
    }

    async fn inspect_call(
        &self,
        req: Request<InspectRequest>,
    ) -> Result<Response<InspectResponse>, Status> {
        let edge = self.edge(&req);
        edge.identity()?;
        let key = edge.keyed(&req.get_ref().key)?;
        let i = self.engine.inspect(&key).await?;
        let holder = i.holder.unwrap_or_default();
        let permits_held = u32::try_from(i.permits_held).unwrap_or(u32::MAX);
        Ok(self.reply(InspectResponse {
            held: !holder.spiffe_id.is_empty() || permits_held > 0,
            holder_spiffe_id: holder.spiffe_id,
            // A semaphore has no one holder record to name its class: the registry does.
            class_name: match i.permits {
                0 => holder.class,
                _ => i.class.unwrap_or_default(),
            },
            acquired_at_unix_ms: holder.acquired_at_ms,
            waiters: u32::try_from(i.waiters).unwrap_or(u32::MAX),
            shared_holders: u32::try_from(i.shared_holders).unwrap_or(u32::MAX),
            permits_held,
            permits: i.permits,
        }))
    }
}

#[tonic::async_trait]
impl Lock for LockService {
    async fn open_session(
        &self,
        req: Request<OpenSessionRequest>,
    ) -> Result<Response<OpenSessionResponse>, Status> {
        let start = Instant::now();
        let span = traces::request("lock.v1/OpenSession", req.metadata());
        observed(
            "open_session",
            start,
            self.open_session_call(req).instrument(span).await,
        )
    }

    async fn close_session(
        &self,
        req: Request<CloseSessionRequest>,
    ) -> Result<Response<CloseSessionResponse>, Status> {
        let start = Instant::now();
        let span = traces::request("lock.v1/CloseSession", req.metadata());
        observed(
            "close_session",
            start,
            self.close_session_call(req).instrument(span).await,
        )
    }

    async fn acquire(
        &self,
        req: Request<AcquireRequest>,
    ) -> Result<Response<AcquireResponse>, Status> {
        let start = Instant::now();
        let span = traces::request("lock.v1/Acquire", req.metadata());
        observed(
            "acquire",
            start,
            self.acquire_call(req).instrument(span).await,
        )
    }

    async fn release(
        &self,
        req: Request<ReleaseRequest>,
    ) -> Result<Response<ReleaseResponse>, Status> {
        let start = Instant::now();
        let span = traces::request("lock.v1/Release", req.metadata());
        observed(
            "release",
            start,
            self.release_call(req).instrument(span).await,
        )
    }

    async fn acquire_all(
        &self,
        req: Request<AcquireAllRequest>,
    ) -> Result<Response<AcquireAllResponse>, Status> {
        let start = Instant::now();
        let span = traces::request("lock.v1/AcquireAll", req.metadata());
        observed(
            "acquire_all",
            start,
            self.acquire_all_call(req).instrument(span).await,
        )
    }

    async fn release_all(
        &self,
        req: Request<ReleaseAllRequest>,
    ) -> Result<Response<ReleaseAllResponse>, Status> {
        let start = Instant::now();
        let span = traces::request("lock.v1/ReleaseAll", req.metadata());
        observed(
            "release_all",
            start,
            self.release_all_call(req).instrument(span).await,
        )
    }

    async fn validate_token(
        &self,
        req: Request<ValidateTokenRequest>,
    ) -> Result<Response<ValidateTokenResponse>, Status> {
        let start = Instant::now();
        let span = traces::request("lock.v1/ValidateToken", req.metadata());
        observed(
            "validate_token",
            start,
            self.validate_token_call(req).instrument(span).await,
        )
    }

    async fn inspect(
        &self,
        req: Request<InspectRequest>,
    ) -> Result<Response<InspectResponse>, Status> {
        let start = Instant::now();
        let span = traces::request("lock.v1/Inspect", req.metadata());
        observed(
            "inspect",
            start,
            self.inspect_call(req).instrument(span).await,
        )
    }

    type KeepAliveStream = KeepAliveStream;

    type HoldStream = HoldStream;

    type ObserveStream = ObserveStream;

    async fn observe(
        &self,
        req: Request<ObserveRequest>,
    ) -> Result<Response<Self::ObserveStream>, Status> {
        let edge = self.edge(&req);
        let stream = crate::serve::observe::serve(self.engine.clone(), &edge, req.get_ref())?;
        Ok(self.reply(Box::pin(stream) as ObserveStream))
    }

    async fn hold(
        &self,
        req: Request<Streaming<HoldRequest>>,
    ) -> Result<Response<Self::HoldStream>, Status> {
        let edge = self.edge(&req);
        edge.identity()?;
        let stream = crate::serve::hold::serve(self.engine.clone(), edge, req.into_inner());
        Ok(self.reply(Box::pin(stream) as HoldStream))
    }

    async fn keep_alive(
        &self,
        req: Request<Streaming<KeepAliveRequest>>,
    ) -> Result<Response<Self::KeepAliveStream>, Status> {
        let who = self.edge(&req).identity()?;
        let stream = keepalive::serve(self.engine.clone(), who, req.into_inner());
        Ok(self.reply(Box::pin(stream) as KeepAliveStream))
    }
}

/// Records a call's latency by operation and outcome (`ok`, or the refusal's reason read
/// back from the status it became: one mapping, in `error.rs`).
fn observed<T>(
    operation: &'static str,
    start: Instant,
    result: Result<Response<T>, Status>,
) -> Result<Response<T>, Status> {
    crate::serve::calls::record(operation, start, &result);
    result
}
