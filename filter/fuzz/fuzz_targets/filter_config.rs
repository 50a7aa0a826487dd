//! The filter's configuration as pushed by `lockctl grants push`: any bytes parsed and
//! compiled, never a panic; a configuration that compiles answers authorisation questions
//! about arbitrary identities and keys without one either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lock_config::{FilterConfig, LockKey};

fuzz_target!(|data: &[u8]| {
    let Ok(compiled) = FilterConfig::from_json(data).and_then(|c| c.compile()) else {
        return;
    };
    let text = String::from_utf8_lossy(data);
    for word in text.split(|c: char| c == '"' || c.is_whitespace()) {
        let _ = compiled.authoriser.grant_of(word);
        if let Ok(key) = LockKey::parse(word) {
            for id in text.split('"') {
                let _ = compiled.authoriser.authorise(id, &key);
            }
        }
    }
});
