//! The SPIFFE Workload API's X.509 half, served by the dev CA on a unix socket: what a
//! SPIRE agent serves a workload, for `make run` and the tests (SPIRE is not installable
//! here; the protocol is the real one, and clients use the maintained `spiffe` crate).
//!
//! Unlike an agent, it does not attest the caller (SPIRE reads the peer's pid and
//! selectors): every caller of the socket gets the one identity it was started with, so
//! the socket's file mode is the only access control. It issues an SVID valid for `ttl`
//! and rotates at half of it, as SPIRE does, pushing the new one on every open stream.

use crate::{DevCa, DevCaError, Leaf};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_stream::Stream;
use tokio_stream::wrappers::WatchStream;
use tonic::{Request, Response, Status};

pub mod proto {
    tonic::include_proto!("_");
}
use proto::spiffe_workload_api_server::{SpiffeWorkloadApi, SpiffeWorkloadApiServer};
use proto::{X509BundlesRequest, X509BundlesResponse, X509svid, X509svidRequest, X509svidResponse};

/// The header every Workload API call carries, so a browser or an SSRF cannot call it.
const SECURITY_HEADER: &str = "workload.spiffe.io";

/// One identity's SVIDs, rotated.
pub struct Issuer {
    ca: DevCa,
    spiffe_id: String,
    trust_domain: String,
    ttl: Duration,
    current: watch::Sender<Arc<X509svidResponse>>,
}

impl Issuer {
    /// Issues the first SVID for `spiffe_id`.
    pub fn new(ca: DevCa, spiffe_id: &str, ttl: Duration) -> Result<Arc<Self>, DevCaError> {
        let trust_domain = spiffe_id
            .strip_prefix("spiffe://")
            .and_then(|rest| rest.split('/').next())
            .filter(|td| !td.is_empty())
            .ok_or_else(|| DevCaError::NotSpiffeId(spiffe_id.to_owned()))?
            .to_owned();
        let first = svid_response(&ca, spiffe_id, ttl)?;
        let (current, _) = watch::channel(Arc::new(first));
        Ok(Arc::new(Self {
            ca,
            spiffe_id: spiffe_id.to_owned(),
            trust_domain,
            ttl,
            current,
        }))
    }

    /// Issues a new SVID and pushes it to every open stream.
    pub fn rotate(&self) -> Result<(), DevCaError> {
        let next = svid_response(&self.ca, &self.spiffe_id, self.ttl)?;
        self.current.send_replace(Arc::new(next));
        Ok(())
    }

    /// Rotates at half the TTL until the process ends.
    pub async fn rotate_forever(self: Arc<Self>) {
        let half = self.ttl / 2;
        loop {
            tokio::time::sleep(half).await;
            if let Err(e) = self.rotate() {
                eprintln!("workload api: rotation failed, serving the previous SVID: {e}");
            }
        }
    }

    /// The tonic service over this issuer.
    pub fn service(self: Arc<Self>) -> SpiffeWorkloadApiServer<Service> {
        SpiffeWorkloadApiServer::new(Service { issuer: self })
    }
}

fn svid_response(
    ca: &DevCa,
    spiffe_id: &str,
    ttl: Duration,
) -> Result<X509svidResponse, DevCaError> {
    let valid = time::Duration::try_from(ttl).unwrap_or(time::Duration::hours(1));
    let issued = ca.issue(&Leaf::svid(spiffe_id).valid_for(valid))?;
    Ok(X509svidResponse {
        svids: vec![X509svid {
            spiffe_id: spiffe_id.to_owned(),
            x509_svid: issued.cert_der,
            x509_svid_key: issued.key_der,
            bundle: ca.bundle_der()?,
            hint: String::new(),
        }],
        crl: Vec::new(),
        federated_bundles: HashMap::new(),
    })
}

pub struct Service {
    issuer: Arc<Issuer>,
}

fn check_header<T>(req: &Request<T>) -> Result<(), Status> {
    match req
        .metadata()
        .get(SECURITY_HEADER)
        .and_then(|v| v.to_str().ok())
    {
        Some("true") => Ok(()),
        // SPIRE's answer to a call without it.
        _ => Err(Status::invalid_argument(
            "security header missing from request",
        )),
    }
}

type Stream_<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl SpiffeWorkloadApi for Service {
    type FetchX509SVIDStream = Stream_<X509svidResponse>;
    type FetchX509BundlesStream = Stream_<X509BundlesResponse>;

    async fn fetch_x509svid(
        &self,
        req: Request<X509svidRequest>,
    ) -> Result<Response<Self::FetchX509SVIDStream>, Status> {
        check_header(&req)?;
        let updates = WatchStream::new(self.issuer.current.subscribe());
        Ok(Response::new(Box::pin(tokio_stream::StreamExt::map(
            updates,
            |r| Ok((*r).clone()),
        ))))
    }

    async fn fetch_x509_bundles(
        &self,
        req: Request<X509BundlesRequest>,
    ) -> Result<Response<Self::FetchX509BundlesStream>, Status> {
        check_header(&req)?;
        let td = self.issuer.trust_domain.clone();
        let updates = WatchStream::new(self.issuer.current.subscribe());
        Ok(Response::new(Box::pin(tokio_stream::StreamExt::map(
            updates,
            move |r| {
                let bundle = r
                    .svids
                    .first()
                    .map(|s| s.bundle.clone())
                    .unwrap_or_default();
                Ok(X509BundlesResponse {
                    crl: Vec::new(),
                    bundles: HashMap::from([(td.clone(), bundle)]),
                })
            },
        ))))
    }
}
