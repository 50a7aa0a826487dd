//! The rehearsal: the install guide (docs/src/deploying/install.md) run as written, and
//! the chart's rendered pods run as the built images under runc.
//!
//! - The guide's `# rehearsal: install` block runs in bash, with `kubectl` and `helm`
//!   rendering instead of applying: `kubectl create ...` gains `--dry-run=client -o yaml`,
//!   `helm install` becomes `helm template` with the same arguments (and the test fixtures'
//!   etcd and Envoy images). Any other verb fails the test: the block must stay runnable.
//! - The rendered objects become pods (`lock_integration::rehearsal`): one network
//!   namespace each, Services resolving to their pods, ConfigMaps and Secrets mounted, args
//!   and env exactly as rendered, init containers first, every image pinned by the digest
//!   the build gave it. etcd's members, the roles and epoch-init hook Jobs, two arbiters
//!   and the edge start in that order, each pod's probes checked against its address.
//! - The guide's `# rehearsal: first lock` block then runs against the pods, with the
//!   pods' /etc/hosts (lock-edge.lock.svc resolves to the edge pod): it prints a token.
//! - A caller holds a key with `lockctl run` past its TTL while one arbiter pod is killed
//!   outright; the hold survives (the command ends 0, not fenced) and another caller is
//!   refused the key meanwhile.
//! - It fails when the chart's ports are wrong: a readiness probe on a port the arbiter
//!   does not listen on, and a values file whose edge stats port is its lock.v1 port
//!   (`--set edge.statsPort=8443`: the schema accepts it, Envoy cannot bind both).
//!
//! Not run here: lock-admin (needs an OpenID provider), the audit tailer (PostgreSQL), the
//! webhook (the API server calls it) and the CronJobs; their images' entry points run in
//! tests/images.rs and their objects pass the schemas in tests/helm.rs.

use lock_integration::images;
use lock_integration::paths::{dep, workspace_bin, workspace_root};
use lock_integration::rehearsal::{Cluster, Objects};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(90);

/// The fenced block of install.md whose first line is `# rehearsal: NAME`, after the
/// install block's `export` lines (a reader runs the blocks in one shell).
fn guide_block(name: &str) -> String {
    let block = raw_block(name);
    if name == "install" {
        return block;
    }
    let exports: String = raw_block("install")
        .lines()
        .filter(|l| l.starts_with("export "))
        .map(|l| format!("{l}\n"))
        .collect();
    exports + &block
}

fn raw_block(name: &str) -> String {
    let page =
        std::fs::read_to_string(workspace_root().join("docs/src/deploying/install.md")).unwrap();
    let marker = format!("# rehearsal: {name}\n");
    let start = page
        .find(&marker)
        .unwrap_or_else(|| panic!("install.md has no `{marker}` block"));
    let end = page[start..].find("```").unwrap() + start;
    page[start..end].to_owned()
}

/// A folder laid out like the repository's root for the guide's commands: deploy/ and
/// config/ from the repository, target/images the images built for this test, and
/// `kubectl`, `helm`, `lockctl` and `devca` first on PATH (the first two render).
struct Workspace {
    dir: PathBuf,
    bin: PathBuf,
    objects: PathBuf,
}

impl Workspace {
    fn new(root: &Path, images: &Path) -> Self {
        let dir = root.join("work");
        let bin = root.join("bin");
        for d in [&dir, &bin, &dir.join("target"), &root.join("done")] {
            std::fs::create_dir_all(d).unwrap();
        }
        let repo = workspace_root();
        for name in ["deploy", "config"] {
            std::os::unix::fs::symlink(repo.join(name), dir.join(name)).unwrap();
        }
        std::os::unix::fs::symlink(images, dir.join("target/images")).unwrap();
        let objects = root.join("objects.yaml");
        let real_kubectl = which("kubectl");
        std::fs::write(
            bin.join("kubectl"),
            format!(
                r#"#!/usr/bin/env bash
# The rehearsal's kubectl: objects are rendered, never applied.
set -euo pipefail
if [[ " $* " == *" create "* ]]; then
  {{ echo "---"; "{kubectl}" "$@" --dry-run=client -o yaml; }} >> "{objects}"
elif [[ " $* " == *" wait "* && " $* " == *" --for=condition=complete "* ]]; then
  for a in "$@"; do
    case "$a" in job/*) test -e "{done}/${{a#job/}}" || {{ echo "rehearsal: $a did not complete" >&2; exit 1; }};; esac
  done
else
  echo "rehearsal: kubectl $* is not a step the rehearsal can run" >&2; exit 2
fi
"#,
                kubectl = real_kubectl.display(),
                objects = objects.display(),
                done = root.join("done").display(),
            ),
        )
        .unwrap();
        std::fs::write(
            bin.join("helm"),
            format!(
                r#"#!/usr/bin/env bash
# The rehearsal's helm: `helm install` renders (helm template) with the same arguments,
# plus the test fixtures' etcd and Envoy images.
set -euo pipefail
[ "$1" = install ] || {{ echo "rehearsal: helm $1 is not a step the rehearsal can run" >&2; exit 2; }}
shift
{{ echo "---"; "{helm}" template "$@" --kube-version 1.37.0 -f "{fixtures}" ${{REHEARSAL_HELM_EXTRA:-}}; }} >> "{objects}"
"#,
                helm = dep("helm").unwrap().display(),
                fixtures = images.join("values-fixtures.yaml").display(),
                objects = objects.display(),
            ),
        )
        .unwrap();
        for tool in ["lockctl", "devca"] {
            std::os::unix::fs::symlink(workspace_bin(tool).unwrap(), bin.join(tool)).unwrap();
        }
        for f in ["kubectl", "helm"] {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(bin.join(f), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Self { dir, bin, objects }
    }

    /// Runs a guide block in bash here; with `hosts`, under a mount namespace whose
    /// /etc/hosts is the pods' (names resolve as in a pod).
    fn run(&self, script: &str, hosts: Option<&Path>) -> (bool, String) {
        let file = self.dir.join("block.sh");
        std::fs::write(&file, format!("set -euo pipefail\n{script}")).unwrap();
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = match hosts {
            Some(h) => {
                let mut c = Command::new("unshare");
                c.args(["--mount", "--propagation", "private", "bash", "-c"])
                    .arg(format!(
                        "mount --bind {} /etc/hosts && exec bash {}",
                        h.display(),
                        file.display()
                    ));
                c
            }
            None => {
                let mut c = Command::new("bash");
                c.arg(&file);
                c
            }
        };
        let out = cmd
            .current_dir(&self.dir)
            .env("PATH", path)
            .env_remove("LOCK_ENDPOINT")
            .output()
            .unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}

fn which(tool: &str) -> PathBuf {
    let out = Command::new("bash")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{tool} not found");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The images, built once per test process (every test here runs the same ones):
/// target/rehearsal/images.
fn built_images() -> (PathBuf, images::Built) {
    static BUILT: std::sync::OnceLock<(PathBuf, images::Built)> = std::sync::OnceLock::new();
    let (dir, built) = BUILT.get_or_init(|| {
        let dir = workspace_root().join("target/rehearsal/images");
        let built = images::build(&dir, "debug", true).unwrap();
        (dir, built)
    });
    (
        dir.clone(),
        images::Built {
            dir: built.dir.clone(),
            images: built.images.clone(),
        },
    )
}

/// Builds the images, runs the guide's install block (helm given `helm_extra` too), and
/// plans the cluster.
fn install_with(tmp: &Path, helm_extra: &str) -> (Workspace, Cluster) {
    let (images_dir, built) = built_images();
    let ws = Workspace::new(tmp, &images_dir);
    let (ok, out) = ws.run(
        &format!(
            "export REHEARSAL_HELM_EXTRA='{helm_extra}'\n{}",
            guide_block("install")
        ),
        None,
    );
    assert!(ok, "the guide's install block failed:\n{out}");
    let objects = Objects::parse(&std::fs::read_to_string(&ws.objects).unwrap()).unwrap();
    let cluster = Cluster::new(objects, built, "lock", &[]).unwrap();
    (ws, cluster)
}

fn install(tmp: &Path) -> (Workspace, Cluster) {
    install_with(tmp, "")
}

fn start_ready(cluster: &mut Cluster, pods: &[&str]) {
    for pod in pods {
        cluster
            .start(pod, PATIENCE)
            .unwrap_or_else(|e| panic!("{e:#}\n{}", cluster.logs()));
    }
    for pod in pods {
        cluster
            .wait_ready(pod, PATIENCE)
            .unwrap_or_else(|e| panic!("{e:#}\n{}", cluster.logs()));
    }
}

fn run_job(cluster: &mut Cluster, ws_root: &Path, job: &str) {
    cluster.start(job, PATIENCE).unwrap();
    let ok = cluster.wait_done(job, PATIENCE).unwrap();
    assert!(
        ok,
        "job {job} failed:\n{}",
        cluster.pod(job).unwrap().logs()
    );
    std::fs::write(ws_root.join("done").join(job), "").unwrap();
}

#[test]
fn the_install_guide_runs_as_pods_and_a_hold_survives_a_killed_arbiter() {
    let tmp = tempfile::Builder::new()
        .prefix("rehearsal")
        .tempdir()
        .unwrap();
    let (ws, mut cluster) = install(tmp.path());
    let planned: Vec<String> = cluster.planned().iter().map(|p| p.name.clone()).collect();
    for want in [
        "lock-etcd-0",
        "lock-etcd-1",
        "lock-etcd-2",
        "lock-etcd-roles",
        "lock-epoch-init",
        "lock-arbiter-0",
        "lock-arbiter-1",
        "lock-edge-0",
    ] {
        assert!(
            planned.iter().any(|p| p == want),
            "{want} not in {planned:?}"
        );
    }

    start_ready(&mut cluster, &["lock-etcd-0", "lock-etcd-1", "lock-etcd-2"]);
    // The hooks, in their weights' order: roles (0), then the epoch (10).
    run_job(&mut cluster, tmp.path(), "lock-etcd-roles");
    run_job(&mut cluster, tmp.path(), "lock-epoch-init");
    start_ready(
        &mut cluster,
        &["lock-arbiter-0", "lock-arbiter-1", "lock-edge-0"],
    );

    // The edge's stats port is the kubelet's and Prometheus's: /ready and
    // /stats/prometheus only. Envoy's admin interface, which can stop or reconfigure it,
    // is not reachable through it (a POST to /quitquitquit finds no route, and Envoy stays).
    let edge = cluster.ip("lock-edge-0").unwrap();
    let http = |method: &str, path: &str| {
        let out = std::process::Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "5",
                "-X",
                method,
            ])
            .arg(format!("http://{edge}:9902{path}"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(http("GET", "/ready"), "200");
    assert_eq!(http("GET", "/stats/prometheus"), "200");
    for (method, path) in [
        ("POST", "/quitquitquit"),
        ("POST", "/logging?level=trace"),
        ("GET", "/config_dump"),
    ] {
        assert_eq!(
            http(method, path),
            "404",
            "{method} {path} through the stats port"
        );
    }
    cluster
        .wait_ready("lock-edge-0", PATIENCE)
        .unwrap_or_else(|e| panic!("the edge did not survive the admin probes: {e:#}"));

    // The guide's first lock, as written, with the pods' names.
    let (ok, out) = ws.run(&guide_block("first lock"), Some(cluster.hosts_file()));
    if !ok && std::env::var_os("REHEARSAL_PAUSE").is_some() {
        eprintln!("REHEARSAL_PAUSED {out}");
        std::thread::sleep(Duration::from_secs(150));
    }
    assert!(
        ok,
        "the guide's first lock failed:\n{out}\n{}",
        cluster.logs()
    );
    let token: u64 = out
        .split_whitespace()
        .find_map(|w| w.strip_prefix("token=")?.parse().ok())
        .unwrap_or_else(|| panic!("no token printed:\n{out}"));
    assert!(token > 0);

    // A holder past its TTL (30 s for pay/ledger) while an arbiter pod is killed.
    let ttl = 30;
    let marker = tmp.path().join("holding");
    let holder = format!(
        "lockctl run pay/ledger/held --endpoint https://lock-edge.lock.svc:8443 \
         --server-name lock-edge.lock.svc --svid pki/spiffe/ledger.pem \
         --svid-key pki/spiffe/ledger.key --ca pki/spiffe/ca.pem \
         -- bash -c 'touch {marker}; sleep {secs}'\n",
        marker = marker.display(),
        secs = ttl + 5,
    );
    let hosts = cluster.hosts_file().to_path_buf();
    let holder_ws = Workspace {
        dir: ws.dir.clone(),
        bin: ws.bin.clone(),
        objects: ws.objects.clone(),
    };
    let handle = std::thread::spawn(move || holder_ws.run(&holder, Some(&hosts)));
    let deadline = std::time::Instant::now() + PATIENCE;
    while !marker.exists() {
        assert!(
            std::time::Instant::now() < deadline && !handle.is_finished(),
            "the holder never held"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    cluster.kill("lock-arbiter-0").unwrap();
    // Meanwhile the key is the holder's: another caller is refused (exit 1, HELD).
    std::thread::sleep(Duration::from_secs(2));
    let other = "lockctl acquire pay/ledger/held --endpoint https://lock-edge.lock.svc:8443 \
         --server-name lock-edge.lock.svc --svid pki/spiffe/ledger.pem \
         --svid-key pki/spiffe/ledger.key --ca pki/spiffe/ca.pem\n";
    let (ok, out) = ws.run(other, Some(cluster.hosts_file()));
    assert!(
        !ok && out.contains("HELD"),
        "another caller was not refused:\n{out}"
    );
    let (ok, out) = handle.join().unwrap();
    assert!(
        ok,
        "the holder did not keep its hold through the arbiter's death (exit 4 is fenced):\n{out}\n{}",
        cluster.logs()
    );
}

/// The rehearsal catches a chart whose ports disagree: here the arbiters' readiness probe
/// names a port the arbiter does not listen on (as a wrong `port:` in a template would).
#[test]
fn a_probe_on_a_wrong_port_fails_the_rehearsal() {
    let tmp = tempfile::Builder::new()
        .prefix("rehearsal")
        .tempdir()
        .unwrap();
    let (ws, cluster) = install(tmp.path());
    drop(cluster);
    let text = std::fs::read_to_string(&ws.objects).unwrap();
    let mut objects = Objects::parse(&text).unwrap();
    let mut changed = false;
    for doc in &mut objects.docs {
        if doc["kind"] == "Deployment" && doc["metadata"]["name"] == "lock-arbiter" {
            let c = &mut doc["spec"]["template"]["spec"]["containers"][0];
            c["readinessProbe"]["httpGet"]["port"] = serde_json::json!(9091);
            changed = true;
        }
    }
    assert!(changed);
    let (_, built) = built_images();
    let mut cluster = Cluster::new(objects, built, "lock", &[]).unwrap();
    cluster.start("lock-arbiter-0", PATIENCE).unwrap();
    let err = cluster
        .wait_ready("lock-arbiter-0", Duration::from_secs(10))
        .unwrap_err();
    assert!(format!("{err:#}").contains("9091"), "{err:#}");
}

/// A wrong port in the values: the edge's stats port set to its lock.v1 port (8443). The
/// values schema accepts it (any port is a port); the rendered edge cannot bind both
/// listeners and never becomes ready.
#[test]
fn a_wrong_port_in_the_values_fails_the_rehearsal() {
    let tmp = tempfile::Builder::new()
        .prefix("rehearsal")
        .tempdir()
        .unwrap();
    let (_ws, mut cluster) = install_with(tmp.path(), "--set edge.statsPort=8443");
    cluster.start("lock-edge-0", PATIENCE).unwrap();
    let err = cluster
        .wait_ready("lock-edge-0", Duration::from_secs(20))
        .unwrap_err();
    let text = format!("{err:#}");
    // Envoy refuses the second listener on one address and exits.
    assert!(
        text.contains("exited") && text.contains("0.0.0.0:8443"),
        "{text}"
    );
}
