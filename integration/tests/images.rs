//! `make images` (integration/scripts/build-images.sh), built here from the binaries this
//! test run built (debug; `make images` builds release the same way):
//! - one commit built twice gives the same digest for every image;
//! - every image's entry point runs under runc, in its own pid, network, ipc, uts and
//!   mount namespaces, as user 65532 with a read-only root, and answers;
//! - an image missing one of the libraries its binary loads fails to run (so the runs
//!   above do show that each image carries what its binary needs);
//! - every image carries the OCI labels; the filter is one layer holding /plugin.wasm,
//!   byte for byte the built filter.

use lock_integration::images::{self, Built};
use lock_integration::paths::workspace_root;
use std::time::Duration;

/// Each product image, then the two fixtures, and the arguments its entry point answers.
const RUNS: &[(&str, &[&str], &str)] = &[
    ("fenced-lock-arbiter", &["--help"], "Usage: arbiter"),
    ("fenced-lock-admin", &["--help"], "Usage: lock-admin"),
    ("fenced-lock-audit", &["--help"], "Usage: lock-audit"),
    ("fenced-lock-webhook", &["--help"], "Usage: lock-webhook"),
    (
        "fenced-lock-registry-sync",
        &["--help"],
        "Usage: lock-registry-sync",
    ),
    ("fenced-lock-lockctl", &["--help"], "Usage: lockctl"),
    ("fenced-lock-pause-test", &["--help"], "Usage: pause-test"),
    ("fenced-lock-test-etcd", &["--version"], "etcd Version:"),
    ("fenced-lock-test-envoy", &["--version"], "version:"),
];

fn build_twice() -> (tempfile::TempDir, Built, Built) {
    let dir = tempfile::tempdir().unwrap();
    let a = images::build(&dir.path().join("a"), "debug", true).unwrap();
    let b = images::build(&dir.path().join("b"), "debug", true).unwrap();
    (dir, a, b)
}

#[test]
fn every_image_is_reproducible_runs_its_entry_point_under_runc_and_is_labelled() {
    let (dir, a, b) = build_twice();
    let names: Vec<&str> = a.images.iter().map(|i| i.name.as_str()).collect();
    for (name, _, _) in RUNS {
        assert!(names.contains(name), "{name} not built: {names:?}");
    }
    assert!(names.contains(&"fenced-lock-filter"), "{names:?}");
    assert_eq!(a.images, b.images, "two builds of one commit differ");
    for image in &a.images {
        assert!(image.digest.starts_with("sha256:") && image.digest.len() == 71);
    }

    for (n, (name, args, answer)) in RUNS.iter().enumerate() {
        let image = a.get(name).unwrap();
        let bundle = dir.path().join(format!("bundle-{n}"));
        images::unpack(&a, image, &bundle).unwrap();
        let config = images::runtime_config(&bundle).unwrap();
        assert_eq!(config["process"]["user"]["uid"], 65532, "{name}");
        assert_eq!(config["process"]["user"]["gid"], 65532, "{name}");
        let namespaces: Vec<&str> = config["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|ns| ns["type"].as_str().unwrap())
            .collect();
        for ns in ["pid", "network", "ipc", "uts", "mount"] {
            assert!(namespaces.contains(&ns), "{name}: {namespaces:?}");
        }
        // Nothing in the image but the binary, the libraries, /etc and /tmp: no shell.
        assert!(!bundle.join("rootfs/bin/sh").exists(), "{name}");
        images::prepare(&bundle, args).unwrap();
        let id = format!("images-{}-{n}", std::process::id());
        let (ok, out) = images::run_to_end(&bundle, &id, Duration::from_secs(60)).unwrap();
        assert!(ok, "{name} {args:?} under runc:\n{out}");
        assert!(out.contains(answer), "{name} {args:?}:\n{out}");
    }

    // The labels, on the config and on the manifest.
    for image in &a.images {
        let layout = a.dir.join("oci").join(&image.name);
        let blob = |digest: &str| -> serde_json::Value {
            let path = layout.join("blobs").join(digest.replace(':', "/"));
            serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
        };
        let manifest = blob(&image.digest);
        let config = blob(manifest["config"]["digest"].as_str().unwrap());
        let revision = std::process::Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(workspace_root())
            .output()
            .unwrap();
        let revision = String::from_utf8_lossy(&revision.stdout).trim().to_owned();
        for (key, want) in [
            ("org.opencontainers.image.revision", revision.as_str()),
            ("org.opencontainers.image.version", image.version.as_str()),
            ("org.opencontainers.image.title", image.name.as_str()),
        ] {
            assert_eq!(
                config["config"]["Labels"][key], want,
                "{} {key}",
                image.name
            );
        }
        assert!(
            config["config"]["Labels"]["org.opencontainers.image.source"]
                .as_str()
                .is_some_and(|s| s.starts_with("https://")),
            "{}",
            image.name
        );
        assert_eq!(
            manifest["annotations"]["org.opencontainers.image.revision"], revision,
            "{}",
            image.name
        );
    }

    // The filter artifact: one layer, /plugin.wasm only, the built filter's bytes.
    let filter = a.get("fenced-lock-filter").unwrap();
    let bundle = dir.path().join("bundle-filter");
    images::unpack(&a, filter, &bundle).unwrap();
    let entries: Vec<String> = std::fs::read_dir(bundle.join("rootfs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(entries, vec!["plugin.wasm".to_owned()]);
    assert_eq!(
        std::fs::read(bundle.join("rootfs/plugin.wasm")).unwrap(),
        std::fs::read(lock_integration::paths::filter_wasm_debug().unwrap()).unwrap()
    );
}

#[test]
fn an_image_without_a_library_its_binary_loads_does_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let script = workspace_root().join("integration/scripts/build-images.sh");
    let out = dir.path().join("one");
    let status = std::process::Command::new("bash")
        .arg(script)
        .args([
            "--profile",
            "debug",
            "--only",
            "fenced-lock-lockctl",
            "--out",
        ])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(out.join("digests.txt")).unwrap();
    let f: Vec<&str> = text.split_whitespace().collect();
    let built = Built {
        dir: out.clone(),
        images: vec![images::Image {
            name: f[0].into(),
            version: f[1].into(),
            digest: f[2].into(),
        }],
    };
    let bundle = dir.path().join("bundle");
    images::unpack(&built, &built.images[0], &bundle).unwrap();
    images::prepare(&bundle, &["--help"]).unwrap();
    let id = format!("images-nolib-{}", std::process::id());
    let (ok, out) = images::run_to_end(&bundle, &id, Duration::from_secs(60)).unwrap();
    assert!(ok, "the whole image runs:\n{out}");
    let libc = bundle.join("rootfs/lib/x86_64-linux-gnu/libc.so.6");
    assert!(libc.exists(), "the image carries libc at the loader's path");
    std::fs::remove_file(&libc).unwrap();
    let (ok, out) =
        images::run_to_end(&bundle, &format!("{id}-b"), Duration::from_secs(60)).unwrap();
    assert!(!ok, "ran without libc:\n{out}");
}
