//! The decision on a key, or on every key of a set: grant first, then region, so an
//! identity without a grant learns nothing about where a namespace lives. Admitted, the
//! key is `x-lock-key` (the ring hash routes on it) and the request goes on.

use super::{KEY_HEADER, RequestGate, State, Step};
use crate::error::EdgeError;
use crate::host::Host;
use crate::method::Keyed;
use lock_config::edge_headers::encode_key;
use lock_config::key_set::KEYS_HEADER;
use lock_config::{CompiledFilterConfig, KeySet, LockKey};

impl RequestGate {
    /// A set's decision: every key is decided as a single key would be (grant, then
    /// region), and any one refused refuses the whole request with that key's refusal,
    /// which for a missing grant is the same NOT_GRANTED reply a single key gets: the
    /// reply never says which key it was. Admitted, the set is `x-lock-keys` (the arbiter
    /// holds the body to it) and its least key is `x-lock-key` (the ring hash routes on it).
    pub(super) fn admit_set(
        &mut self,
        host: &mut impl Host,
        config: &CompiledFilterConfig,
        identity: &str,
        set: &KeySet,
    ) -> Result<Step, EdgeError> {
        let decided = if self.switches().set_first_key_only {
            &set.keys()[..1]
        } else {
            set.keys()
        };
        // Grants for every key before any region: an identity without a grant on one key
        // learns nothing about where the others live.
        for key in decided {
            config
                .authoriser
                .authorise(identity, key)
                .ok_or(EdgeError::NotGranted)?;
        }
        for key in decided {
            match config.namespaces.get(key.namespace()) {
                Some(home) if *home != config.region => {
                    host.count(&format!("lock_edge.redirected.ns.{}", key.namespace()));
                    return Err(EdgeError::RegionRedirect {
                        region: home.clone(),
                    });
                }
                Some(_) => {}
                None => return Err(EdgeError::NotGranted),
            }
        }
        host.set_request_header(KEY_HEADER, Some(&encode_key(set.first().as_str())));
        host.set_request_header(KEYS_HEADER, Some(&set.encode_header()));
        let mut namespaces: Vec<&str> = set.keys().iter().map(LockKey::namespace).collect();
        namespaces.dedup();
        for ns in namespaces {
            host.count(&format!("lock_edge.allowed.ns.{ns}"));
        }
        self.state = State::Decided;
        Ok(Step::Continue)
    }

    /// The key's decision, the same on both paths: grant, then region (so an identity
    /// without a grant learns nothing about where a namespace lives); admitted, the key is
    /// set as `x-lock-key` for the ring hash and the arbiter.
    pub(super) fn admit(
        &mut self,
        host: &mut impl Host,
        config: &CompiledFilterConfig,
        identity: &str,
        key: &LockKey,
        method: Keyed,
    ) -> Result<Step, EdgeError> {
        config
            .authoriser
            .authorise(identity, key)
            .ok_or(EdgeError::NotGranted)?;
        match config.namespaces.get(key.namespace()) {
            Some(home) if *home != config.region => {
                // Declared namespaces only: a bounded label.
                host.count(&format!("lock_edge.redirected.ns.{}", key.namespace()));
                return Err(EdgeError::RegionRedirect {
                    region: home.clone(),
                });
            }
            Some(_) => {}
            // Grants are validated against declared namespaces; an undeclared one cannot be
            // granted, so this is unreachable with a valid config. Refuse like no grant.
            None => return Err(EdgeError::NotGranted),
        }
        host.set_request_header(KEY_HEADER, Some(&encode_key(key.as_str())));
        host.count(&format!("lock_edge.allowed.ns.{}", key.namespace()));
        if method == Keyed::ValidateToken {
            // ADR-16 wants teams on conditional writes instead: who still reads grants back
            // shows per namespace (declared ones only, so the label is bounded).
            host.count(&format!("lock_edge.validate.ns.{}", key.namespace()));
        }
        self.state = State::Decided;
        Ok(Step::Continue)
    }
}
