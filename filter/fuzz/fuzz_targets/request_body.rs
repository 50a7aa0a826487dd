//! A request body as the edge reads it: the first gRPC frame, the message decoded for the
//! method the first byte picks, the key validated and encoded for `x-lock-key`. Never a
//! panic; a complete frame is within the size limit and re-frames to the same bytes; every
//! valid key survives its header encoding unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lock_config::LockKey;
use lock_config::edge_headers::{decode_key, encode_key};
use lock_filter::frame::{FirstFrame, MAX_MESSAGE_LEN, first_message, frame};
use lock_filter::method::Keyed;

const METHODS: [Keyed; 5] = [
    Keyed::OpenSession,
    Keyed::Acquire,
    Keyed::Release,
    Keyed::ValidateToken,
    Keyed::Inspect,
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let method = METHODS[usize::from(pick) % METHODS.len()];
    let Ok(FirstFrame::Complete(message)) = first_message(body) else {
        return;
    };
    assert!(message.len() <= MAX_MESSAGE_LEN);
    assert_eq!(&frame(message)[..], &body[..5 + message.len()]);
    let Ok(key) = method.key_of(message) else {
        return;
    };
    if let Ok(key) = LockKey::parse(&key) {
        let header = encode_key(key.as_str());
        assert!(header.bytes().all(|b| b.is_ascii_graphic()), "{header:?}");
        assert_eq!(decode_key(header.as_bytes()).as_deref(), Some(key.as_str()));
    }
});
