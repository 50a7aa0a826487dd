//! The headers the edge sets for the arbiter, and how the key travels in one.
//!
//! The trust chain (docs/src/security/trust-chain.md): the filter derives both values from the verified
//! client certificate and the decoded request body, removes any a client sent (in headers
//! and trailers), and sets them in the request's initial HEADERS; the arbiter reads them
//! from those initial headers only, on a connection from an allow-listed edge identity.
//!
//! A key is UTF-8 (DESIGN 4.1 allows non-ASCII letters), but a header value a gRPC server
//! can read as text is visible ASCII. So `x-lock-key` carries the key percent-encoded:
//! every byte outside `!`..=`~`, and `%` itself, becomes `%XX`. The encoding is a bijection,
//! so every valid key round-trips and the ring hash sees one stable value per key.

/// The key of a keyed request, percent-encoded (see [`encode_key`]).
pub const KEY_HEADER: &str = "x-lock-key";
/// The key as request metadata from the client (issue 19), encoded as [`encode_key`] does:
/// the edge decides a keyed call on its headers with it instead of pausing for the body.
/// The client's to send (not an `x-lock-*` header); the edge removes it once read, and
/// the arbiter refuses a body key other than the `x-lock-key` the edge set from it.
pub const METADATA_KEY_HEADER: &str = "lock-key";
/// The caller's SPIFFE ID, from the verified peer certificate.
pub const IDENTITY_HEADER: &str = "x-lock-identity";
/// A reply header naming the arbiter that answered (affinity is checked with it; the
/// production Envoy config strips it if topology must not be visible).
pub const ARBITER_HEADER: &str = "x-lock-arbiter";
/// Every header with this prefix is the edge's to set: a client's is removed or refused.
pub const EDGE_HEADER_PREFIX: &str = "x-lock-";

/// True for a header name in the edge's namespace (`x-lock-*`, any case).
pub fn is_edge_header(name: &str) -> bool {
    name.len() >= EDGE_HEADER_PREFIX.len()
        && name.as_bytes()[..EDGE_HEADER_PREFIX.len()]
            .eq_ignore_ascii_case(EDGE_HEADER_PREFIX.as_bytes())
}

/// `key` as the value of `x-lock-key`.
pub fn encode_key(key: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(key.len());
    for &b in key.as_bytes() {
        if b.is_ascii_graphic() && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xF)]));
        }
    }
    out
}

/// The key carried in an `x-lock-key` value; None if it is not exactly what
/// [`encode_key`] produces for some UTF-8 string (one spelling per key, so a forged
/// alternative encoding cannot hash to another arbiter and still match).
pub fn decode_key(value: &[u8]) -> Option<String> {
    let mut out = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        let b = value[i];
        if b == b'%' {
            let hi = hex_digit(*value.get(i + 1)?)?;
            let lo = hex_digit(*value.get(i + 2)?)?;
            let byte = (hi << 4) | lo;
            if byte.is_ascii_graphic() && byte != b'%' {
                return None; // encoded where encode_key would not
            }
            out.push(byte);
            i += 3;
        } else if b.is_ascii_graphic() {
            out.push(b);
            i += 1;
        } else {
            return None;
        }
    }
    String::from_utf8(out).ok()
}

/// Upper-case hex only: the one spelling encode_key writes.
fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn table() {
        for (key, wire) in [
            ("pay/ledger/42", "pay/ledger/42"),
            ("pay/ledger/über", "pay/ledger/%C3%BCber"),
            ("pay/ключ", "pay/%D0%BA%D0%BB%D1%8E%D1%87"),
            ("pay/a b", "pay/a%20b"),
            ("pay/100%", "pay/100%25"),
        ] {
            assert_eq!(encode_key(key), wire);
            assert_eq!(decode_key(wire.as_bytes()).as_deref(), Some(key));
        }
    }

    #[test]
    fn refuses_other_spellings() {
        for bad in [
            &b"pay/%c3%bc"[..], // lower-case hex
            b"pay/%41",         // an encoded visible byte
            b"pay/%2",          // cut short
            b"pay/%ZZ",
            b"pay/a b",      // a raw space
            b"pay/\xc3\xbc", // raw UTF-8
            b"pay/%C3",      // not UTF-8 once decoded
        ] {
            assert_eq!(decode_key(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn edge_header_names() {
        assert!(is_edge_header("x-lock-identity"));
        assert!(is_edge_header("X-Lock-Key"));
        assert!(is_edge_header("x-lock-anything"));
        assert!(!is_edge_header("x-lock"));
        assert!(!is_edge_header("x-locksmith"));
        assert!(!is_edge_header("grpc-timeout"));
    }

    proptest! {
        #[test]
        fn every_string_round_trips(s in any::<String>()) {
            let wire = encode_key(&s);
            prop_assert!(wire.bytes().all(|b| b.is_ascii_graphic()));
            prop_assert_eq!(decode_key(wire.as_bytes()), Some(s));
        }
    }
}
