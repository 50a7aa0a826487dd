//! Who the peer is (on mTLS only): the URI SAN of its certificate, exactly one (counted in
//! the connection manager's XFCC), a valid SPIFFE ID of a trusted domain.

use crate::error::EdgeError;
use crate::host::Host;
use crate::xfcc::uri_sans;
use lock_config::filter_config::EdgeTestSwitches;
use lock_config::{CompiledFilterConfig, SpiffeId};

pub(super) fn peer_identity(
    host: &impl Host,
    xfcc: Option<&str>,
    config: &CompiledFilterConfig,
    switches: EdgeTestSwitches,
) -> Result<SpiffeId, EdgeError> {
    let mtls = host.property(&["connection", "mtls"]);
    if mtls.as_deref() != Some(&[1u8][..]) {
        return Err(EdgeError::NoPeerCertificate);
    }
    let san = host
        .property(&["connection", "uri_san_peer_certificate"])
        .and_then(|b| String::from_utf8(b).ok())
        .filter(|s| !s.is_empty())
        .ok_or(EdgeError::InvalidSpiffeId)?;
    // An X.509-SVID has exactly one URI SAN; the attribute above is only the first.
    if !switches.first_uri_san {
        let uris = xfcc
            .ok_or(EdgeError::InvalidSpiffeId)
            .and_then(|h| uri_sans(h).map_err(|_| EdgeError::InvalidSpiffeId))?;
        if uris.len() != 1 || uris[0] != san {
            return Err(EdgeError::InvalidSpiffeId);
        }
    }
    let id = SpiffeId::parse(&san).map_err(|_| EdgeError::InvalidSpiffeId)?;
    if !config
        .trust_domains
        .iter()
        .any(|td| td == id.trust_domain())
    {
        return Err(EdgeError::ForeignTrustDomain);
    }
    Ok(id)
}
