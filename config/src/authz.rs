//! The compiled authoriser (ADR-19): per SPIFFE ID (exact match), a radix trie of granted
//! prefixes on segment boundaries. Built once per configuration, immutable afterwards.

use crate::identity::SpiffeId;
use crate::key::{KeyPrefix, LockKey, trie_key};
use radix_trie::Trie;
use std::collections::HashMap;

/// What a matching grant carries: the index of the grant, which keys its rate budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantMatch {
    pub grant: usize,
}

#[derive(Debug, Default)]
pub struct Authoriser {
    by_identity: HashMap<String, (usize, Trie<String, ()>)>,
}

impl Authoriser {
    /// Compiles `(identity, prefixes)` pairs; the position of a pair is its grant index.
    pub fn compile<'a>(grants: impl IntoIterator<Item = (&'a SpiffeId, &'a [KeyPrefix])>) -> Self {
        let mut by_identity: HashMap<String, (usize, Trie<String, ()>)> = HashMap::new();
        for (i, (id, prefixes)) in grants.into_iter().enumerate() {
            let entry = by_identity
                .entry(id.as_str().to_owned())
                .or_insert_with(|| (i, Trie::new()));
            for p in prefixes {
                entry.1.insert(trie_key(p.as_str()), ());
            }
        }
        Self { by_identity }
    }

    /// Does `identity` hold a grant covering `key`? The identity string is matched exactly.
    pub fn authorise(&self, identity: &str, key: &LockKey) -> Option<GrantMatch> {
        let (grant, trie) = self.by_identity.get(identity)?;
        trie.get_ancestor(&trie_key(key.as_str()))
            .map(|_| GrantMatch { grant: *grant })
    }

    /// True when the identity has at least one grant (admits its keyless session calls).
    pub fn knows(&self, identity: &str) -> bool {
        self.by_identity.contains_key(identity)
    }

    /// Grant index of an identity, if it has any grant.
    pub fn grant_of(&self, identity: &str) -> Option<usize> {
        self.by_identity.get(identity).map(|(i, _)| *i)
    }

    pub fn identities(&self) -> usize {
        self.by_identity.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn auth(grants: &[(&str, &[&str])]) -> (Authoriser, Vec<(SpiffeId, Vec<KeyPrefix>)>) {
        let owned: Vec<(SpiffeId, Vec<KeyPrefix>)> = grants
            .iter()
            .map(|(id, ps)| {
                (
                    SpiffeId::parse(id).unwrap(),
                    ps.iter().map(|p| KeyPrefix::parse(p).unwrap()).collect(),
                )
            })
            .collect();
        let a = Authoriser::compile(owned.iter().map(|(i, p)| (i, p.as_slice())));
        (a, owned)
    }

    #[test]
    fn longest_prefix_on_segment_boundaries_exact_identity() {
        let (a, _) = auth(&[
            ("spiffe://td/ledger", &["pay/ledger"]),
            ("spiffe://td/ops", &["pay", "orders/x"]),
        ]);
        let k = |s| LockKey::parse(s).unwrap();
        assert!(
            a.authorise("spiffe://td/ledger", &k("pay/ledger"))
                .is_some()
        );
        assert!(
            a.authorise("spiffe://td/ledger", &k("pay/ledger/42"))
                .is_some()
        );
        assert!(
            a.authorise("spiffe://td/ledger", &k("pay/ledgers"))
                .is_none()
        );
        assert!(a.authorise("spiffe://td/ledger", &k("pay/other")).is_none());
        assert!(
            a.authorise("spiffe://td/ledger/x", &k("pay/ledger"))
                .is_none()
        );
        assert!(
            a.authorise("spiffe://td/Ledger", &k("pay/ledger"))
                .is_none()
        );
        assert!(
            a.authorise("spiffe://td/ops", &k("pay/anything/deep"))
                .is_some()
        );
        assert!(a.authorise("spiffe://td/ops", &k("payroll/x")).is_none());
        assert!(a.authorise("spiffe://td/ops", &k("orders/xy")).is_none());
        assert!(a.knows("spiffe://td/ops") && !a.knows("spiffe://td/nobody"));
    }

    proptest! {
        // The trie answers exactly what a linear scan of `KeyPrefix::covers` answers.
        #[test]
        fn matches_linear_scan(
            prefixes in proptest::collection::vec("[ab]{1,2}(/[ab]{1,2}){0,2}", 1..6),
            key in "[ab]{1,2}/[ab]{1,2}(/[ab]{1,2}){0,2}",
        ) {
            let ps: Vec<KeyPrefix> = prefixes.iter().map(|p| KeyPrefix::parse(p).unwrap()).collect();
            let id = SpiffeId::parse("spiffe://td/w").unwrap();
            let a = Authoriser::compile([(&id, ps.as_slice())]);
            let key = LockKey::parse(&key).unwrap();
            let linear = ps.iter().any(|p| p.covers(&key));
            prop_assert_eq!(a.authorise(id.as_str(), &key).is_some(), linear);
        }
    }
}
