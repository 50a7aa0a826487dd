//! The edge filter's plugin configuration (JSON): what `lockctl` compiles from the registry
//! and the filter compiles again in `on_configure` (parse, compile, freeze). Any error
//! rejects the whole configuration, so Envoy keeps the previous one.

use crate::authz::Authoriser;
use crate::identity::SpiffeId;
use crate::key::KeyPrefix;
use crate::registry::{RateBudget, Registry};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FilterConfig {
    /// The region this Envoy serves; keys homed elsewhere get REGION_REDIRECT.
    pub region: String,
    /// SPIFFE trust domains whose identities are accepted.
    pub trust_domains: Vec<String>,
    /// Namespace -> home region.
    pub namespaces: BTreeMap<String, String>,
    pub grants: Vec<FilterGrant>,
    /// Budget for grants that do not set their own.
    #[serde(default)]
    pub default_rate: Option<RateBudget>,
    /// Deliberately unsafe switches that turn one edge check off, so the boundary tests can
    /// show they catch its absence (as the gate's `--inject-bug` does for the arbiter). Only
    /// a debug build of the filter honours them; a release build refuses any configuration
    /// that names one (see [`CompiledFilterConfig::test_switches`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsafe_test_switches: Vec<String>,
}

/// Edge checks a debug build of the filter can be told to skip (`unsafeTestSwitches`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EdgeTestSwitches {
    /// `ignore-trailers`: request trailers pass untouched and an undecided request is
    /// resumed by them (the behaviour before issue 13).
    pub ignore_trailers: bool,
    /// `first-uri-san`: a certificate with several URI SANs is accepted as its first one.
    pub first_uri_san: bool,
    /// `observe-unkeyed`: Observe passes like KeepAlive, without a key decision (as a
    /// filter that did not know the method's key would).
    pub observe_unkeyed: bool,
    /// `set-first-key-only`: AcquireAll and ReleaseAll are authorised on their set's
    /// first key alone (as a filter that read only one key of the body would).
    pub set_first_key_only: bool,
}

impl EdgeTestSwitches {
    pub fn any(&self) -> bool {
        self.ignore_trailers
            || self.first_uri_san
            || self.observe_unkeyed
            || self.set_first_key_only
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FilterGrant {
    pub spiffe_id: String,
    pub prefixes: Vec<String>,
    #[serde(default)]
    pub rate: Option<RateBudget>,
    /// ValidateToken's own bucket (None: `rate`'s numbers, or the default's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validate_rate: Option<RateBudget>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterConfigError {
    #[error("not a filter configuration: {0}")]
    Json(String),
    #[error("{field}: {problem}")]
    Invalid { field: String, problem: String },
}

fn invalid(field: impl Into<String>, problem: impl Into<String>) -> FilterConfigError {
    FilterConfigError::Invalid {
        field: field.into(),
        problem: problem.into(),
    }
}

/// The frozen, compiled configuration one filter instance serves from.
#[derive(Debug)]
pub struct CompiledFilterConfig {
    pub region: String,
    pub trust_domains: Vec<String>,
    pub namespaces: HashMap<String, String>,
    pub authoriser: Authoriser,
    /// Budget per grant index (None = unlimited).
    pub rates: Vec<Option<RateBudget>>,
    /// ValidateToken's budget per grant index, drawn from a bucket of its own (ADR-16).
    pub validate_rates: Vec<Option<RateBudget>>,
    /// Checks to skip; the filter refuses a non-empty set unless built with debug
    /// assertions.
    pub test_switches: EdgeTestSwitches,
}

impl FilterConfig {
    /// The filter configuration for one region's Envoys, from a validated registry.
    pub fn from_registry(
        registry: &Registry,
        region: &str,
        trust_domains: &[String],
        default_rate: Option<RateBudget>,
    ) -> Self {
        Self {
            region: region.to_owned(),
            trust_domains: trust_domains.to_vec(),
            namespaces: registry
                .namespaces()
                .map(|(n, s)| (n.to_owned(), s.region.clone()))
                .collect(),
            grants: registry
                .grants()
                .map(|(id, g)| FilterGrant {
                    spiffe_id: id.as_str().to_owned(),
                    prefixes: g.prefixes.iter().map(|p| p.as_str().to_owned()).collect(),
                    rate: g.rate,
                    validate_rate: g.validate_rate,
                })
                .collect(),
            default_rate,
            unsafe_test_switches: Vec::new(),
        }
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, FilterConfigError> {
        serde_json::from_slice(bytes).map_err(|e| FilterConfigError::Json(e.to_string()))
    }

    pub fn to_json(&self) -> String {
        // Serializing plain data with string keys cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Validates every field and compiles the authoriser.
    pub fn compile(&self) -> Result<CompiledFilterConfig, FilterConfigError> {
        if self.region.trim().is_empty() {
            return Err(invalid("region", "must not be empty"));
        }
        if self.trust_domains.is_empty() {
            return Err(invalid(
                "trustDomains",
                "at least one trust domain is required",
            ));
        }
        for (i, td) in self.trust_domains.iter().enumerate() {
            SpiffeId::parse(&format!("spiffe://{td}/x"))
                .map_err(|e| invalid(format!("trustDomains[{i}]"), e.to_string()))?;
        }
        for (ns, region) in &self.namespaces {
            crate::key::validate_namespace(ns)
                .map_err(|e| invalid(format!("namespaces.{ns}"), e.to_string()))?;
            if region.trim().is_empty() {
                return Err(invalid(
                    format!("namespaces.{ns}"),
                    "region must not be empty",
                ));
            }
        }
        let mut seen = HashSet::new();
        let mut compiled = Vec::with_capacity(self.grants.len());
        let mut rates = Vec::with_capacity(self.grants.len());
        let mut validate_rates = Vec::with_capacity(self.grants.len());
        for (i, g) in self.grants.iter().enumerate() {
            let id = SpiffeId::parse(&g.spiffe_id)
                .map_err(|e| invalid(format!("grants[{i}].spiffeId"), e.to_string()))?;
            if !self.trust_domains.iter().any(|td| td == id.trust_domain()) {
                return Err(invalid(
                    format!("grants[{i}].spiffeId"),
                    "trust domain is not in trustDomains",
                ));
            }
            if !seen.insert(g.spiffe_id.clone()) {
                return Err(invalid(
                    format!("grants[{i}].spiffeId"),
                    "duplicate identity",
                ));
            }
            let mut prefixes = Vec::with_capacity(g.prefixes.len());
            for (j, p) in g.prefixes.iter().enumerate() {
                let field = format!("grants[{i}].prefixes[{j}]");
                let prefix = KeyPrefix::parse(p).map_err(|e| invalid(&field, e.to_string()))?;
                if !self.namespaces.contains_key(prefix.namespace()) {
                    return Err(invalid(field, "namespace is not declared"));
                }
                prefixes.push(prefix);
            }
            for (field, rate) in [
                ("rate", g.rate),
                ("validateRate", g.validate_rate),
                ("defaultRate", self.default_rate),
            ] {
                if rate.is_some_and(|r| !r.is_valid()) {
                    return Err(invalid(format!("grants[{i}].{field}"), RateBudget::RULE));
                }
            }
            rates.push(g.rate.or(self.default_rate));
            validate_rates.push(g.validate_rate.or(g.rate).or(self.default_rate));
            compiled.push((id, prefixes));
        }
        let mut test_switches = EdgeTestSwitches::default();
        for (i, name) in self.unsafe_test_switches.iter().enumerate() {
            match name.as_str() {
                "ignore-trailers" => test_switches.ignore_trailers = true,
                "first-uri-san" => test_switches.first_uri_san = true,
                "observe-unkeyed" => test_switches.observe_unkeyed = true,
                "set-first-key-only" => test_switches.set_first_key_only = true,
                _ => {
                    return Err(invalid(
                        format!("unsafeTestSwitches[{i}]"),
                        "unknown switch (ignore-trailers, first-uri-san, observe-unkeyed, set-first-key-only)",
                    ));
                }
            }
        }
        Ok(CompiledFilterConfig {
            region: self.region.clone(),
            trust_domains: self.trust_domains.clone(),
            namespaces: self.namespaces.clone().into_iter().collect(),
            authoriser: Authoriser::compile(compiled.iter().map(|(i, p)| (i, p.as_slice()))),
            rates,
            validate_rates,
            test_switches,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> FilterConfig {
        FilterConfig {
            region: "local".into(),
            trust_domains: vec!["dev.lock.local".into()],
            namespaces: [("pay".to_owned(), "local".to_owned())].into(),
            grants: vec![FilterGrant {
                spiffe_id: "spiffe://dev.lock.local/w".into(),
                prefixes: vec!["pay/ledger".into()],
                rate: None,
                validate_rate: None,
            }],
            default_rate: None,
            unsafe_test_switches: Vec::new(),
        }
    }

    #[test]
    fn round_trips_and_compiles() {
        let c = sample();
        let back = FilterConfig::from_json(c.to_json().as_bytes()).unwrap();
        assert_eq!(back, c);
        let compiled = back.compile().unwrap();
        assert!(compiled.authoriser.knows("spiffe://dev.lock.local/w"));
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        fn json_value() -> impl Strategy<Value = serde_json::Value> {
            let leaf = prop_oneof![
                Just(serde_json::Value::Null),
                any::<bool>().prop_map(serde_json::Value::from),
                any::<i64>().prop_map(serde_json::Value::from),
                "\\PC{0,24}".prop_map(serde_json::Value::from),
                "(spiffe://[a-z.]{0,12}/[a-z/]{0,12}|[a-z]{1,6}(/[a-z]{0,4}){0,3})"
                    .prop_map(serde_json::Value::from),
            ];
            leaf.prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..4)
                        .prop_map(serde_json::Value::from),
                    proptest::collection::btree_map(
                        prop_oneof![
                            Just("region".to_owned()),
                            Just("trustDomains".to_owned()),
                            Just("namespaces".to_owned()),
                            Just("grants".to_owned()),
                            Just("spiffeId".to_owned()),
                            Just("prefixes".to_owned()),
                            Just("rate".to_owned()),
                            Just("perSecond".to_owned()),
                            Just("burst".to_owned()),
                            Just("defaultRate".to_owned()),
                            "[a-z]{1,5}",
                        ],
                        inner,
                        0..5,
                    )
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
                ]
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

            /// Arbitrary bytes: an error, never a panic.
            #[test]
            fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
                if let Ok(c) = FilterConfig::from_json(&bytes) {
                    let _ = c.compile();
                }
            }

            /// Plausible shapes with the right field names and wrong values: parse and
            /// compile either accept or refuse, never panic; what compiles round-trips.
            #[test]
            fn plausible_documents(v in json_value()) {
                let bytes = serde_json::to_vec(&v).unwrap();
                if let Ok(c) = FilterConfig::from_json(&bytes)
                    && c.compile().is_ok()
                {
                    prop_assert_eq!(FilterConfig::from_json(c.to_json().as_bytes()).unwrap(), c);
                }
            }
        }
    }

    #[test]
    fn rejects_bad_configurations() {
        let mut c = sample();
        c.grants[0].spiffe_id = "spiffe://other.domain/w".into();
        assert!(c.compile().is_err());
        let mut c = sample();
        c.grants[0].prefixes[0] = "nope/x".into();
        assert!(c.compile().is_err());
        let mut c = sample();
        c.grants.push(c.grants[0].clone());
        assert!(c.compile().is_err());
        let mut c = sample();
        c.trust_domains.clear();
        assert!(c.compile().is_err());
        assert!(FilterConfig::from_json(b"{\"region\":\"x\",\"bogus\":1}").is_err());
        assert!(FilterConfig::from_json(b"not json").is_err());
    }
}
