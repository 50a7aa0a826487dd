//! The filter's configuration as Envoy's file-based ECDS resource (ADR-24, DESIGN 8): a
//! `DiscoveryResponse` whose resource is a `TypedExtensionConfig` holding the `Wasm` HTTP
//! filter. Written atomically (temp file + rename) by `lockctl grants push`; Envoy applies it
//! to new streams without a restart, and keeps the previous one if `on_configure` refuses it.
//!
//! The VM configuration (vm_id, code) stays the same across pushes, so Envoy keeps the VM and
//! its shared data (the rate buckets) and only reconfigures the plugin.

use crate::FilterConfig;
use serde_json::{Value, json};

/// Name of the extension config; Envoy's stats use it:
/// `extension_config_discovery.http_filter.lock_edge.{config_reload,update_rejected}`.
pub const EXTENSION_NAME: &str = "lock_edge";
pub const VM_ID: &str = "lock_edge";

/// The ECDS document for `config`, running the filter at `wasm_path`. `version` appears in
/// Envoy's config dump; a content hash makes identical pushes identical.
pub fn discovery_response(config: &FilterConfig, wasm_path: &str) -> Value {
    let configuration = serde_json::to_string(config).unwrap_or_default();
    discovery_response_raw(&configuration, wasm_path)
}

/// As [`discovery_response`] with the plugin configuration as given (tests use it to push
/// configurations the filter must refuse).
pub fn discovery_response_raw(configuration: &str, wasm_path: &str) -> Value {
    json!({
        "version_info": version_text(config_version(configuration.as_bytes())),
        "resources": [{
            "@type": "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig",
            "name": EXTENSION_NAME,
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
                "config": {
                    "name": EXTENSION_NAME,
                    "root_id": EXTENSION_NAME,
                    // Without it Envoy never delivers the body to a filter that paused on
                    // headers, and the key could not be read before routing (DESIGN 8).
                    "allow_on_headers_stop_iteration": true,
                    "failure_policy": "FAIL_CLOSED",
                    "configuration": {
                        "@type": "type.googleapis.com/google.protobuf.StringValue",
                        "value": configuration,
                    },
                    "vm_config": {
                        "vm_id": VM_ID,
                        "runtime": "envoy.wasm.runtime.v8",
                        "code": {"local": {"filename": wasm_path}},
                    },
                },
            },
        }],
    })
}

/// The filter configuration inside an ECDS document written by [`discovery_response`]
/// (what is live: `lockctl grants push` diffs against it). None if it is not one.
pub fn configuration_of(doc: &Value) -> Option<FilterConfig> {
    let value = doc
        .get("resources")?
        .get(0)?
        .pointer("/typed_config/config/configuration/value")?
        .as_str()?;
    FilterConfig::from_json(value.as_bytes()).ok()
}

/// The version of a filter configuration (the plugin configuration's bytes): the low 48
/// bits of its FNV-1a hash, so it survives a Prometheus gauge (a float) exactly. The ECDS
/// `version_info`, the filter's `lock_edge.config_version` gauge and `lockctl registry
/// status` all show this number.
pub fn config_version(configuration: &[u8]) -> u64 {
    fnv1a(configuration) & 0xffff_ffff_ffff
}

/// A version as printed everywhere: 12 hex digits.
pub fn version_text(version: u64) -> String {
    format!("{version:012x}")
}

/// FNV-1a 64: a stable content hash for the version (no dependency for 10 lines).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_shape() {
        let c = FilterConfig {
            region: "r".into(),
            trust_domains: vec!["td".into()],
            namespaces: Default::default(),
            grants: vec![],
            default_rate: None,
            unsafe_test_switches: Vec::new(),
        };
        let d = discovery_response(&c, "/x.wasm");
        let r = &d["resources"][0];
        assert_eq!(r["name"], EXTENSION_NAME);
        let cfg = &r["typed_config"]["config"];
        assert_eq!(cfg["allow_on_headers_stop_iteration"], true);
        let value = cfg["configuration"]["value"].as_str().unwrap();
        assert_eq!(FilterConfig::from_json(value.as_bytes()).unwrap(), c);
        assert_eq!(configuration_of(&d), Some(c.clone()));
        assert_eq!(configuration_of(&json!({"resources": []})), None);
        assert_eq!(
            d["version_info"],
            discovery_response(&c, "/x.wasm")["version_info"]
        );
    }
}
