//! The gRPC length-prefixed message framing: one flag byte (1 = compressed), a 4-byte
//! big-endian length, the message. The filter reads only the first message of a request.

use crate::error::EdgeError;

const PREFIX_LEN: usize = 5;
/// Largest request message the edge reads. A lock request is a key (<= 576 bytes) and a few
/// integers; anything near this size is not a lock request.
pub const MAX_MESSAGE_LEN: usize = 4096;

#[derive(Debug, PartialEq, Eq)]
pub enum FirstFrame<'a> {
    /// The first message is complete.
    Complete(&'a [u8]),
    /// More body is needed before the first message can be read.
    Incomplete,
}

/// Reads the first message of a buffered body.
pub fn first_message(body: &[u8]) -> Result<FirstFrame<'_>, EdgeError> {
    let Some(prefix) = body.get(..PREFIX_LEN) else {
        return Ok(FirstFrame::Incomplete);
    };
    match prefix[0] {
        0 => {}
        1 => return Err(EdgeError::Compressed),
        _ => return Err(EdgeError::Undecodable),
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if len > MAX_MESSAGE_LEN {
        return Err(EdgeError::TooLarge);
    }
    match body.get(PREFIX_LEN..PREFIX_LEN + len) {
        Some(msg) => Ok(FirstFrame::Complete(msg)),
        None => Ok(FirstFrame::Incomplete),
    }
}

/// Frames a message (used by tests and clients of the frame reader).
pub fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(PREFIX_LEN + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_split_and_whole_frames() {
        let f = frame(b"hello");
        for cut in 0..f.len() {
            assert_eq!(first_message(&f[..cut]).unwrap(), FirstFrame::Incomplete);
        }
        assert_eq!(first_message(&f).unwrap(), FirstFrame::Complete(b"hello"));
        let mut two = f.clone();
        two.extend(frame(b"second"));
        assert_eq!(first_message(&two).unwrap(), FirstFrame::Complete(b"hello"));
    }

    #[test]
    fn refuses_compressed_oversized_and_bad_flags() {
        let mut f = frame(b"x");
        f[0] = 1;
        assert_eq!(first_message(&f), Err(EdgeError::Compressed));
        f[0] = 7;
        assert_eq!(first_message(&f), Err(EdgeError::Undecodable));
        let big = [0u8, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(first_message(&big), Err(EdgeError::TooLarge));
    }

    proptest! {
        #[test]
        fn never_panics(body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = first_message(&body);
        }
    }
}
