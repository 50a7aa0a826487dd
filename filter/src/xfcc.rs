//! The URI SANs of the peer certificate, from the `x-forwarded-client-cert` header.
//!
//! Envoy's attribute `connection.uri_san_peer_certificate` is the *first* URI SAN only, so
//! a certificate with two (not an X.509-SVID, which has exactly one) would be taken as its
//! first. The connection manager is configured with `forward_client_cert_details:
//! SANITIZE_SET` and `set_current_client_cert_details: {uri: true}`: it discards any XFCC
//! the client sent and writes one element for this connection, with one `URI=` pair per
//! URI SAN. The filter counts them. Without that header (Envoy configured otherwise) the
//! request is refused: the check fails closed.
//!
//! Format (Envoy docs, "x-forwarded-client-cert"): elements separated by `,`, pairs by `;`,
//! `key=value`; a value containing `,`, `;` or `=` is double-quoted, with `\"` inside.

pub const XFCC_HEADER: &str = "x-forwarded-client-cert";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XfccError {
    /// More than one element: the header was not set by this Envoy alone.
    NotOneElement,
    /// A pair without `=`, or an unterminated quote.
    Malformed,
}

/// The `URI` values of the header's single element, in order.
pub fn uri_sans(header: &str) -> Result<Vec<String>, XfccError> {
    let elements = split_unquoted(header, b',')?;
    let [element] = elements.as_slice() else {
        return Err(XfccError::NotOneElement);
    };
    let mut uris = Vec::new();
    for pair in split_unquoted(element, b';')? {
        let (k, v) = pair.split_once('=').ok_or(XfccError::Malformed)?;
        if k.trim().eq_ignore_ascii_case("uri") {
            uris.push(unquote(v.trim())?);
        }
    }
    Ok(uris)
}

/// Splits on `sep` outside double quotes (a backslash escapes the next character inside).
fn split_unquoted(s: &str, sep: u8) -> Result<Vec<&str>, XfccError> {
    let bytes = s.as_bytes();
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, &b) in bytes.iter().enumerate() {
        if escaped {
            escaped = false;
        } else if quoted && b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            quoted = !quoted;
        } else if !quoted && b == sep {
            parts.push(&s[start..i]);
            start = i + 1;
        }
    }
    if quoted || escaped {
        return Err(XfccError::Malformed);
    }
    parts.push(&s[start..]);
    Ok(parts)
}

fn unquote(v: &str) -> Result<String, XfccError> {
    let Some(inner) = v.strip_prefix('"') else {
        return Ok(v.to_owned());
    };
    let inner = inner.strip_suffix('"').ok_or(XfccError::Malformed)?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            out.push(chars.next().ok_or(XfccError::Malformed)?);
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let a = "spiffe://dev.lock.local/ns/pay/sa/ledger";
        let b = "spiffe://dev.lock.local/ns/ops/sa/lockctl";
        let cases: Vec<(String, Result<Vec<String>, XfccError>)> = vec![
            (
                format!("By=spiffe://dev.lock.local/ns/edge/sa/envoy;Hash=ab12;URI={a}"),
                Ok(vec![a.into()]),
            ),
            (
                format!("Hash=ab12;URI={a};URI={b}"),
                Ok(vec![a.into(), b.into()]),
            ),
            ("Hash=ab12".into(), Ok(vec![])),
            (format!("uri={a}"), Ok(vec![a.into()])),
            // A quoted value may hide separators; they are not pairs of their own.
            (
                format!("Hash=1;URI=\"{a};URI={b}\""),
                Ok(vec![format!("{a};URI={b}")]),
            ),
            ("URI=\"x\\\"y\"".into(), Ok(vec!["x\"y".into()])),
            (format!("URI={a},URI={b}"), Err(XfccError::NotOneElement)),
            ("Hash=1;URI=\"open".into(), Err(XfccError::Malformed)),
            ("Hash=1;URI".into(), Err(XfccError::Malformed)),
        ];
        for (header, want) in cases {
            assert_eq!(uri_sans(&header), want, "{header}");
        }
    }
}
