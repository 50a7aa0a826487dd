//! Encodes a refusal as `grpc-status-details-bin`: a `google.rpc.Status` holding one
//! `google.rpc.ErrorInfo`. The arbiter uses tonic-types for the same bytes; the filter
//! (wasm, no tonic) uses this.

use crate::proto::google::rpc::{Any, ErrorInfo, Status};
use crate::reason::{ERROR_DOMAIN, Reason};
use base64::Engine as _;
use prost::Message as _;
use std::collections::HashMap;

/// Header carrying the binary status details.
pub const STATUS_DETAILS_HEADER: &str = "grpc-status-details-bin";
const ERROR_INFO_TYPE_URL: &str = "type.googleapis.com/google.rpc.ErrorInfo";

/// Serialized `google.rpc.Status` for `reason`, with `message` and `metadata`.
pub fn encode_status(reason: Reason, message: &str, metadata: &[(&str, &str)]) -> Vec<u8> {
    let info = ErrorInfo {
        reason: reason.as_str().to_owned(),
        domain: ERROR_DOMAIN.to_owned(),
        metadata: metadata
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<HashMap<_, _>>(),
    };
    Status {
        code: reason.code() as i32,
        message: message.to_owned(),
        details: vec![Any {
            type_url: ERROR_INFO_TYPE_URL.to_owned(),
            value: info.encode_to_vec(),
        }],
    }
    .encode_to_vec()
}

/// The header value: gRPC binary headers are base64 without padding on the wire, and
/// decoders accept both; tonic emits unpadded standard base64.
pub fn encode_status_header(reason: Reason, message: &str, metadata: &[(&str, &str)]) -> String {
    base64::engine::general_purpose::STANDARD_NO_PAD
        .encode(encode_status(reason, message, metadata))
}

/// Decodes an ErrorInfo from a `google.rpc.Status` byte string (used by clients and tests).
pub fn decode_error_info(status_bytes: &[u8]) -> Option<ErrorInfo> {
    let status = Status::decode(status_bytes).ok()?;
    status
        .details
        .iter()
        .find(|a| a.type_url == ERROR_INFO_TYPE_URL)
        .and_then(|a| ErrorInfo::decode(a.value.as_slice()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_error_info() {
        let bytes = encode_status(
            Reason::RegionRedirect,
            "homed elsewhere",
            &[("region", "eu-2")],
        );
        let info = decode_error_info(&bytes).unwrap();
        assert_eq!(info.reason, "REGION_REDIRECT");
        assert_eq!(info.domain, "lock.v1");
        assert_eq!(
            info.metadata.get("region").map(String::as_str),
            Some("eu-2")
        );
    }
}
