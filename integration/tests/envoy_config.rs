//! The deployment configuration is tested: the rendered local bootstrap passes
//! `envoy --mode validate` with the built wasm.

use lock_config::FilterConfig;
use lock_integration::envoy::{Envoy, EnvoyConfig};
use lock_integration::paths::dev_registry;
use lock_integration::pki::{Pki, TRUST_DOMAIN};

#[test]
fn local_bootstrap_validates() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::create(&dir.path().join("pki")).unwrap();
    let registry = lock_store::registry_files::load(&dev_registry()).unwrap();
    let filter = FilterConfig::from_registry(&registry, "local", &[TRUST_DOMAIN.into()], None);
    let cfg = EnvoyConfig::new(
        &pki.dir,
        filter,
        vec![
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
        ],
    )
    .unwrap();
    let path = dir.path().join("envoy.yaml");
    cfg.write_ecds(&cfg.filter).unwrap();
    std::fs::write(&path, cfg.render().unwrap()).unwrap();
    Envoy::validate(&path).unwrap();

    // The check can fail: a bootstrap with a broken field is rejected.
    let broken = cfg
        .render()
        .unwrap()
        .replace("lb_policy: RING_HASH", "lb_policy: NOT_A_POLICY");
    std::fs::write(&path, broken).unwrap();
    assert!(Envoy::validate(&path).is_err());
}

/// The production example is a real configuration: Envoy validates it (SDS from the SPIRE
/// agent socket, ECDS for the filter, overload manager, HTTP/2 limits).
#[test]
fn production_example_validates() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(
        lock_integration::paths::workspace_root().join("envoy/production.yaml"),
    )
    .unwrap()
    .replace("${HOSTNAME}", "test")
    .replace(
        "/etc/lock/ecds/lock-edge.ecds.yaml",
        dir.path().join("ecds.yaml").to_str().unwrap(),
    )
    .replace(
        "watched_directory: {path: /etc/lock/ecds}",
        &format!("watched_directory: {{path: {}}}", dir.path().display()),
    );
    let registry = lock_store::registry_files::load(&dev_registry()).unwrap();
    let filter = FilterConfig::from_registry(&registry, "local", &[TRUST_DOMAIN.into()], None);
    let doc = lock_config::ecds::discovery_response(
        &filter,
        lock_integration::paths::filter_wasm()
            .unwrap()
            .to_str()
            .unwrap(),
    );
    std::fs::write(
        dir.path().join("ecds.yaml"),
        serde_json::to_string(&doc).unwrap(),
    )
    .unwrap();
    let path = dir.path().join("production.yaml");
    std::fs::write(&path, text).unwrap();
    Envoy::validate(&path).unwrap();
}
