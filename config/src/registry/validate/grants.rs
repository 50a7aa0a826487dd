//! LockGrant documents (ADR-19): each SPIFFE ID's grants merged into one, prefixes
//! checked against the namespaces, one rate budget per identity.

use super::{MergedGrant, Validator};
use crate::identity::SpiffeId;
use crate::key::KeyPrefix;
use crate::registry::documents::*;
use std::collections::BTreeMap;

impl Validator {
    pub(super) fn merge_grants(
        &mut self,
        docs: Vec<(String, String, LockGrantSpec)>,
        namespaces: &BTreeMap<String, NamespaceSpec>,
    ) -> BTreeMap<SpiffeId, MergedGrant> {
        let mut grants: BTreeMap<SpiffeId, MergedGrant> = BTreeMap::new();
        for (source, id, spec) in docs {
            let spiffe = match SpiffeId::parse(&spec.spiffe_id) {
                Ok(s) => s,
                Err(e) => {
                    self.err(&source, &id, "spec.spiffeId", e.to_string());
                    continue;
                }
            };
            if spec.prefixes.is_empty() {
                self.err(
                    &source,
                    &id,
                    "spec.prefixes",
                    "at least one prefix is required",
                );
            }
            let mut prefixes = Vec::new();
            for (i, p) in spec.prefixes.iter().enumerate() {
                let field = format!("spec.prefixes[{i}]");
                match KeyPrefix::parse(p) {
                    Ok(prefix) if !namespaces.contains_key(prefix.namespace()) => self.err(
                        &source,
                        &id,
                        &field,
                        format!("no Namespace named {}", prefix.namespace()),
                    ),
                    Ok(prefix) => prefixes.push(prefix),
                    Err(e) => self.err(&source, &id, &field, format!("invalid prefix {p:?}: {e}")),
                }
            }
            for (field, rate) in [
                ("spec.rate", spec.rate),
                ("spec.validateRate", spec.validate_rate),
            ] {
                if rate.is_some_and(|r| !r.is_valid()) {
                    self.err(&source, &id, field, RateBudget::RULE);
                }
            }
            let entry = grants.entry(spiffe).or_insert(MergedGrant {
                prefixes: Vec::new(),
                rate: None,
                validate_rate: None,
            });
            entry.prefixes.extend(prefixes);
            for (name, merged, set) in [
                ("rate", &mut entry.rate, spec.rate),
                ("validateRate", &mut entry.validate_rate, spec.validate_rate),
            ] {
                match (*merged, set) {
                    (Some(a), Some(b)) if a != b => self.err(
                        &source,
                        &id,
                        &format!("spec.{name}"),
                        format!("another LockGrant for this SPIFFE ID sets a different {name}"),
                    ),
                    (None, Some(b)) => *merged = Some(b),
                    _ => {}
                }
            }
        }
        grants
    }
}
