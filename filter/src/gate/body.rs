//! The first message of a keyed call: buffered until complete (or refused at the end of
//! the stream), then the key it names, or a set's keys, decided as on the fast path.

use super::{RequestGate, State, Step};
use crate::error::EdgeError;
use crate::frame::{FirstFrame, first_message};
use crate::host::Host;
use crate::method::Keyed;
use lock_config::{KeySet, KeySetError, LockKey};

impl RequestGate {
    pub(super) fn check_body(
        &mut self,
        host: &mut impl Host,
        method: Keyed,
        body_size: usize,
        eos: bool,
    ) -> Result<Step, EdgeError> {
        let config = self.config.clone().ok_or(EdgeError::Unconfigured)?;
        let body = host.request_body(body_size).unwrap_or_default();
        let message = match first_message(&body)? {
            FirstFrame::Complete(m) => m,
            FirstFrame::Incomplete if eos => return Err(EdgeError::Truncated),
            FirstFrame::Incomplete => return Ok(Step::Pause),
        };
        let State::Body { identity, .. } = &self.state else {
            return Err(EdgeError::Unconfigured);
        };
        let identity = identity.clone();
        if method.is_set() {
            let set = KeySet::parse(&method.keys_of(message)?).map_err(|e| match e {
                KeySetError::Key(k) => EdgeError::InvalidKey(k),
                KeySetError::Size | KeySetError::Duplicate(_) => EdgeError::BadKeySet,
            })?;
            return self.admit_set(host, &config, &identity, &set);
        }
        let key = LockKey::parse(&method.key_of(message)?).map_err(EdgeError::InvalidKey)?;
        self.admit(host, &config, &identity, &key, method)
    }
}
