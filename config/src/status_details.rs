//! The refusal on the wire, in one place: `grpc-status-details-bin` is a `google.rpc.Status`
//! holding one `google.rpc.ErrorInfo` (DESIGN 4.4). The filter (wasm, no tonic) and the
//! arbiter encode with [`encode_status`]; the client, lockctl and the tests decode with
//! [`refusal_of`]. No tonic here: the filter links this crate.

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

/// A refusal of this service as the caller sees it: the contract reason and its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: Reason,
    pub metadata: HashMap<String, String>,
}

/// The refusal carried by a gRPC status (its numeric `code` and its binary details), if it
/// has an ErrorInfo of this service's domain with a reason of the contract. HELD under
/// DEADLINE_EXCEEDED is the waited-and-still-held variant.
pub fn refusal_of(code: i32, status_bytes: &[u8]) -> Option<Refusal> {
    let info = decode_error_info(status_bytes)?;
    if info.domain != ERROR_DOMAIN {
        return None;
    }
    let mut reason = Reason::from_wire(&info.reason)?;
    if reason == Reason::Held && code == crate::reason::GrpcCode::DeadlineExceeded as i32 {
        reason = Reason::HeldDeadline;
    }
    Some(Refusal {
        reason,
        metadata: info.metadata,
    })
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

    #[test]
    fn refusal_of_reads_the_contract_only() {
        let held = encode_status(Reason::Held, "held", &[]);
        let r = refusal_of(10, &held).unwrap();
        assert_eq!(r.reason, Reason::Held);
        // The same reason under DEADLINE_EXCEEDED: it waited and it is still held.
        assert_eq!(refusal_of(4, &held).unwrap().reason, Reason::HeldDeadline);
        let foreign = Status {
            code: 10,
            message: String::new(),
            details: vec![Any {
                type_url: ERROR_INFO_TYPE_URL.to_owned(),
                value: ErrorInfo {
                    reason: "HELD".into(),
                    domain: "other.example".into(),
                    metadata: HashMap::new(),
                }
                .encode_to_vec(),
            }],
        }
        .encode_to_vec();
        assert_eq!(refusal_of(10, &foreign), None);
        assert_eq!(refusal_of(10, b"not protobuf at all \xff"), None);
        assert_eq!(refusal_of(10, &[]), None);
    }
}
