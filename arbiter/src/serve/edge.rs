//! What the edge decided, read where the edge wrote it: the request's initial HEADERS.
//!
//! tonic merges HTTP/2 request *trailers* into the metadata a unary handler sees, replacing
//! headers of the same name (`Grpc::map_request_unary`: the message, then
//! `metadata_mut().merge(trailers)`). A value read from metadata in a handler can therefore
//! be a client's, whatever the edge set (issue 13: a trailer `x-lock-identity` acted as any
//! identity). The interceptor below runs before the body is read, when the metadata is
//! exactly the initial HEADERS frame: it moves `x-lock-identity` and `x-lock-key` out of the
//! metadata into a typed request extension, and handlers read only that extension. A trailer
//! arriving later lands in metadata nobody reads.
//!
//! The values are trusted because the connection is from an allow-listed edge identity
//! (mutual TLS, `peer_tls`), which is the only place they can have been set honestly.
//!
//! The client's `lock-instance` (`lock_config::instance`) is taken from the same initial
//! headers. It is not the edge's and not trusted as a claim: it only decides whether a
//! hold of the caller's own identity is this process's leak or a sibling replica's hold.

use crate::error::ArbiterError;
use crate::ops::bugs::{Bug, Bugs};
use lock_config::edge_headers::{IDENTITY_HEADER, KEY_HEADER, decode_key};
use lock_config::instance::{INSTANCE_HEADER, parse_instance};
use lock_config::key_set::KEYS_HEADER;
use lock_config::{KeySet, LockKey};
use tonic::metadata::MetadataMap;
use tonic::{Request, Status};

/// The edge's decision as it arrived in the initial headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EdgeContext {
    /// `x-lock-identity`: the caller's SPIFFE ID (None if absent or not text).
    pub identity: Option<String>,
    /// `x-lock-key`, as sent (percent-encoded); decoded only when compared.
    key_header: Option<Vec<u8>>,
    /// `lock-instance`, as the client sent it; checked only when a session is opened.
    instance: Option<Vec<u8>>,
    /// `x-lock-keys`, as sent: the set of an AcquireAll or ReleaseAll.
    keys_header: Option<Vec<u8>>,
}

impl EdgeContext {
    fn take_from(md: &mut MetadataMap) -> Self {
        let identity = md
            .remove(IDENTITY_HEADER)
            .and_then(|v| v.to_str().ok().map(str::to_owned))
            .filter(|s| !s.is_empty());
        let key_header = md.remove(KEY_HEADER).map(|v| v.as_bytes().to_vec());
        let instance = md.remove(INSTANCE_HEADER).map(|v| v.as_bytes().to_vec());
        let keys_header = md.remove(KEYS_HEADER).map(|v| v.as_bytes().to_vec());
        Self {
            identity,
            key_header,
            instance,
            keys_header,
        }
    }

    fn read_from(md: &MetadataMap) -> Self {
        Self {
            identity: md
                .get(IDENTITY_HEADER)
                .and_then(|v| v.to_str().ok().map(str::to_owned))
                .filter(|s| !s.is_empty()),
            key_header: md.get(KEY_HEADER).map(|v| v.as_bytes().to_vec()),
            instance: md.get(INSTANCE_HEADER).map(|v| v.as_bytes().to_vec()),
            keys_header: md.get(KEYS_HEADER).map(|v| v.as_bytes().to_vec()),
        }
    }

    /// The edge's context of `req`: the extension the interceptor stored. With the
    /// debug-only bug `edge-headers-from-metadata`, the metadata as tonic left it (trailers
    /// merged in), which is what the boundary tests show they catch.
    pub fn of<T>(req: &Request<T>, bugs: &Bugs) -> Self {
        if bugs.has(Bug::EdgeHeadersFromMetadata) {
            return Self::read_from(req.metadata());
        }
        req.extensions().get::<Self>().cloned().unwrap_or_default()
    }

    pub fn identity(&self) -> Result<String, ArbiterError> {
        self.identity.clone().ok_or(ArbiterError::NoIdentity)
    }

    /// The caller's process instance, if it sent one (None: the older leak rule, by
    /// identity alone, applies to its sessions).
    pub fn instance(&self) -> Result<Option<String>, ArbiterError> {
        self.instance
            .as_deref()
            .map(parse_instance)
            .transpose()
            .map_err(ArbiterError::BadInstance)
    }

    /// This context with its key replaced by `key`: the debug-only bug
    /// `hold-key-from-message`, a Hold stream believing each message's own key.
    pub fn with_key_of(&self, key: &str) -> Self {
        Self {
            key_header: Some(lock_config::edge_headers::encode_key(key).into_bytes()),
            ..self.clone()
        }
    }

    /// The key of a keyed request. The edge sets `x-lock-key` from the decoded body; a
    /// request whose header and body disagree did not come through an honest edge.
    pub fn keyed(&self, body_key: &str) -> Result<LockKey, ArbiterError> {
        let key = LockKey::parse(body_key)?;
        match self.key_header.as_deref().and_then(decode_key) {
            Some(h) if h == key.as_str() => Ok(key),
            _ => Err(ArbiterError::KeyHeaderMismatch),
        }
    }
}

impl EdgeContext {
    /// The set of a multi-key request. The edge sets `x-lock-keys` from the decoded body
    /// after deciding every key; a body whose set is not exactly that one (another key,
    /// one more, one fewer) did not come through an honest edge.
    pub fn keyed_set(&self, body_keys: &[String]) -> Result<KeySet, ArbiterError> {
        let set = KeySet::parse(body_keys).map_err(ArbiterError::BadKeySet)?;
        match self.keys_header.as_deref().and_then(KeySet::decode_header) {
            Some(h) if h == set => Ok(set),
            _ => Err(ArbiterError::KeyHeaderMismatch),
        }
    }
}

/// The interceptor: initial headers -> [`EdgeContext`] extension, edge headers removed
/// from the metadata so nothing downstream can read a later copy by mistake.
pub fn intercept(
    bugs: Bugs,
    drain: crate::ops::drain::Drain,
) -> impl Fn(Request<()>) -> Result<Request<()>, Status> + Clone {
    move |mut req: Request<()>| {
        // Draining: nothing new starts here; the request is answered before it is read.
        if drain.is_draining() {
            return Err(crate::error::ArbiterError::Draining.into());
        }
        if bugs.has(Bug::EdgeHeadersFromMetadata) {
            return Ok(req);
        }
        let ctx = EdgeContext::take_from(req.metadata_mut());
        req.extensions_mut().insert(ctx);
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn request(identity: &str, key: &str) -> Request<()> {
        let mut r = Request::new(());
        r.metadata_mut()
            .insert(IDENTITY_HEADER, identity.parse().unwrap());
        r.metadata_mut().insert(KEY_HEADER, key.parse().unwrap());
        r
    }

    #[test]
    fn later_metadata_does_not_change_what_the_edge_set() {
        let req = intercept(Bugs::default(), crate::ops::drain::Drain::default())(request(
            "spiffe://td/a",
            "pay/%C3%BC",
        ))
        .unwrap();
        // What tonic's trailer merge does after the interceptor ran.
        let (mut md, ext, msg) = req.into_parts();
        md.insert(IDENTITY_HEADER, "spiffe://td/forged".parse().unwrap());
        md.insert(KEY_HEADER, "pay/forged".parse().unwrap());
        let req = Request::from_parts(md, ext, msg);
        let ctx = EdgeContext::of(&req, &Bugs::default());
        assert_eq!(ctx.identity().unwrap(), "spiffe://td/a");
        assert_eq!(ctx.keyed("pay/ü").unwrap().as_str(), "pay/ü");
        assert!(matches!(
            ctx.keyed("pay/forged"),
            Err(ArbiterError::KeyHeaderMismatch)
        ));
    }

    #[test]
    fn missing_or_undecodable_headers_are_refused() {
        let ctx = EdgeContext::of(&Request::new(()), &Bugs::default());
        assert!(matches!(ctx.identity(), Err(ArbiterError::NoIdentity)));
        let req = intercept(Bugs::default(), crate::ops::drain::Drain::default())(request(
            "spiffe://td/a",
            "pay/%c3%bc",
        ))
        .unwrap();
        let ctx = EdgeContext::of(&req, &Bugs::default());
        assert!(matches!(
            ctx.keyed("pay/ü"),
            Err(ArbiterError::KeyHeaderMismatch)
        ));
    }

    /// A set is held to the `x-lock-keys` the edge decided: the same keys in any body
    /// order pass, one more, one fewer or another key do not, nor a set with no header.
    #[test]
    fn a_body_set_must_be_the_edges() {
        let mut r = Request::new(());
        r.metadata_mut()
            .insert(KEYS_HEADER, "pay/a pay/b".parse().unwrap());
        let req = intercept(Bugs::default(), crate::ops::drain::Drain::default())(r).unwrap();
        let ctx = EdgeContext::of(&req, &Bugs::default());
        let set = |keys: &[&str]| {
            ctx.keyed_set(&keys.iter().map(|k| (*k).to_owned()).collect::<Vec<_>>())
        };
        assert_eq!(
            set(&["pay/b", "pay/a"]).unwrap().names(),
            ["pay/a", "pay/b"]
        );
        for bad in [
            &["pay/a"][..],
            &["pay/a", "pay/b", "pay/c"],
            &["pay/a", "pay/x"],
        ] {
            assert!(
                matches!(set(bad), Err(ArbiterError::KeyHeaderMismatch)),
                "{bad:?}"
            );
        }
        assert!(matches!(
            set(&["pay/a", "pay/a"]),
            Err(ArbiterError::BadKeySet(_))
        ));
        let none = EdgeContext::default();
        assert!(matches!(
            none.keyed_set(&["pay/a".to_owned()]),
            Err(ArbiterError::KeyHeaderMismatch)
        ));
    }
}
