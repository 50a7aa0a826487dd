//! Registry validation: the one function used by `lockctl registry check`, by the arbiter at
//! load and (for the grant part, through the compiled filter configuration) by the filter.

use super::date::Date;
use super::documents::*;
use super::errors::{RegistryError, RegistryErrors};
use super::{DEFAULT_TTL_SECONDS, Source};
use crate::identity::SpiffeId;
use crate::key::{KeyPrefix, LockKey, trie_key};
use radix_trie::Trie;
use std::collections::BTreeMap;

mod classes;
mod grants;

/// A grant after merging every LockGrant document of one SPIFFE ID.
#[derive(Debug, Clone)]
pub struct MergedGrant {
    pub prefixes: Vec<KeyPrefix>,
    pub rate: Option<RateBudget>,
    /// ValidateToken's own budget (None: `rate`'s numbers, in a bucket of its own).
    pub validate_rate: Option<RateBudget>,
}

/// A validated, frozen registry.
#[derive(Debug)]
pub struct Registry {
    namespaces: BTreeMap<String, NamespaceSpec>,
    classes: BTreeMap<String, LockClassSpec>,
    /// trie_key(class prefix) -> class name: longest-prefix class lookup.
    class_index: Trie<String, String>,
    grants: BTreeMap<SpiffeId, MergedGrant>,
}

/// The class a key resolves to, with its effective TTL.
#[derive(Debug, Clone, Copy)]
pub struct ResolvedClass<'a> {
    pub name: &'a str,
    pub spec: &'a LockClassSpec,
    pub ttl_seconds: u32,
}

impl ResolvedClass<'_> {
    /// The class's lock-delay in seconds, if it has one (`lockDelaySeconds` > 0).
    pub fn lock_delay_seconds(&self) -> Option<u32> {
        self.spec.lock_delay_seconds.filter(|d| *d > 0)
    }

    /// A semaphore class's permits (`permits: N`, N >= 2); None: an exclusive lock.
    pub fn permits(&self) -> Option<u32> {
        self.spec.permits.filter(|n| *n >= 2)
    }
}

impl Registry {
    /// Parses every source and validates all rules. `today` decides expiry of waivers and
    /// pause-test results (a parameter, so validation stays pure and testable).
    pub fn load(sources: &[Source], today: Date) -> Result<Registry, RegistryErrors> {
        let mut v = Validator::default();
        let mut docs = Vec::new();
        for src in sources {
            v.parse_source(src, &mut docs);
        }
        v.build(docs, today)
    }

    pub fn namespaces(&self) -> impl Iterator<Item = (&str, &NamespaceSpec)> {
        self.namespaces.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn classes(&self) -> impl Iterator<Item = ResolvedClass<'_>> {
        self.classes.iter().map(|(name, spec)| ResolvedClass {
            name,
            spec,
            ttl_seconds: effective_ttl(spec),
        })
    }

    pub fn grants(&self) -> impl Iterator<Item = (&SpiffeId, &MergedGrant)> {
        self.grants.iter()
    }

    /// The key's class: the longest class prefix covering it.
    pub fn class_for(&self, key: &LockKey) -> Option<ResolvedClass<'_>> {
        let name = self
            .class_index
            .get_ancestor_value(&trie_key(key.as_str()))?;
        let (name, spec) = self.classes.get_key_value(name)?;
        Some(ResolvedClass {
            name,
            spec,
            ttl_seconds: effective_ttl(spec),
        })
    }
}

fn effective_ttl(spec: &LockClassSpec) -> u32 {
    spec.ttl_seconds.unwrap_or(DEFAULT_TTL_SECONDS)
}

struct Located {
    source: String,
    doc: Document,
}

#[derive(Default)]
struct Validator {
    errors: Vec<RegistryError>,
}

impl Validator {
    fn err(&mut self, source: &str, document: &str, field: &str, problem: impl Into<String>) {
        self.errors.push(RegistryError {
            source: source.to_owned(),
            document: document.to_owned(),
            field: field.to_owned(),
            problem: problem.into(),
        });
    }

    #[cfg(feature = "yaml")]
    fn parse_source(&mut self, src: &Source, out: &mut Vec<Located>) {
        use serde::Deserialize as _;
        for (i, de) in serde_yaml_ng::Deserializer::from_str(&src.text).enumerate() {
            let label = format!("document #{}", i + 1);
            let value = match serde_yaml_ng::Value::deserialize(de) {
                Ok(v) => v,
                Err(e) => {
                    self.err(&src.name, &label, "-", format!("not YAML: {e}"));
                    // A syntax error ends the stream: later documents cannot be located.
                    return;
                }
            };
            if value.is_null() {
                continue;
            }
            // Custom resources as exported from a cluster read the same (resource.rs).
            let Ok(json) = serde_json::to_value(&value) else {
                self.err(&src.name, &label, "-", "not representable as JSON");
                continue;
            };
            for value in super::resource::normalize(json) {
                let name = value
                    .get("metadata")
                    .and_then(|m| m.get("name"))
                    .and_then(|n| n.as_str())
                    .map_or(label.clone(), str::to_owned);
                let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("?");
                let id = format!("{kind}/{name}");
                match serde_json::from_value::<Document>(value) {
                    Ok(doc) => out.push(Located {
                        source: src.name.clone(),
                        doc,
                    }),
                    Err(e) => self.err(&src.name, &id, "spec", e.to_string()),
                }
            }
        }
    }

    #[cfg(not(feature = "yaml"))]
    fn parse_source(&mut self, src: &Source, _out: &mut Vec<Located>) {
        self.err(&src.name, "-", "-", "built without YAML support");
    }

    fn build(mut self, docs: Vec<Located>, today: Date) -> Result<Registry, RegistryErrors> {
        let mut namespaces = BTreeMap::new();
        let mut classes: BTreeMap<String, (String, LockClassSpec)> = BTreeMap::new();
        let mut grant_docs = Vec::new();
        let mut results = Vec::new();
        let mut seen = BTreeMap::new();

        for Located { source, doc } in docs {
            let id = format!("{}/{}", doc.kind(), doc.name());
            if doc.api_version() != API_VERSION {
                self.err(&source, &id, "apiVersion", format!("must be {API_VERSION}"));
            }
            if let Some(first) = seen.insert(id.clone(), source.clone()) {
                self.err(
                    &source,
                    &id,
                    "metadata.name",
                    format!("duplicate (first in {first})"),
                );
                continue;
            }
            match doc {
                Document::Namespace { metadata, spec, .. } => {
                    if crate::key::validate_namespace(&metadata.name).is_err() {
                        self.err(
                            &source,
                            &id,
                            "metadata.name",
                            "namespace must be a DNS label",
                        );
                    }
                    if spec.region.trim().is_empty() {
                        self.err(&source, &id, "spec.region", "must not be empty");
                    }
                    if let Some(owner) = &spec.owner
                        && !super::documents::valid_owner(owner)
                    {
                        self.err(
                            &source,
                            &id,
                            "spec.owner",
                            format!(
                                "{owner:?} is not a label value alerts can route on (lower-case letters, digits and '-', at most 63)"
                            ),
                        );
                    }
                    namespaces.insert(metadata.name, spec);
                }
                Document::LockClass { metadata, spec, .. } => {
                    classes.insert(metadata.name, (source, spec));
                }
                Document::LockGrant { spec, .. } => grant_docs.push((source, id, spec)),
                Document::PauseTestResult { spec, .. } => results.push((source, id, spec)),
            }
        }

        let mut class_index = Trie::new();
        for (name, (source, spec)) in &classes {
            let id = format!("LockClass/{name}");
            self.check_class(source, &id, name, spec, &namespaces, &results, today);
            for (i, p) in spec.prefixes.iter().enumerate() {
                let Ok(prefix) = KeyPrefix::parse(p) else {
                    continue;
                };
                if let Some(other) = class_index.insert(trie_key(prefix.as_str()), name.clone()) {
                    self.err(
                        source,
                        &id,
                        &format!("spec.prefixes[{i}]"),
                        format!("prefix {p} is already claimed by class {other}"),
                    );
                }
            }
        }
        for (source, id, spec) in &results {
            if !classes.contains_key(&spec.class) {
                self.err(
                    source,
                    id,
                    "spec.class",
                    format!("no LockClass named {}", spec.class),
                );
            }
        }

        let grants = self.merge_grants(grant_docs, &namespaces);
        if !self.errors.is_empty() {
            return Err(RegistryErrors(self.errors));
        }
        Ok(Registry {
            namespaces,
            classes: classes.into_iter().map(|(n, (_, s))| (n, s)).collect(),
            class_index,
            grants,
        })
    }
}

#[cfg(all(test, feature = "yaml"))]
mod tests;
