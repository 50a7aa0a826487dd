//! Pure: the chart's rendered objects in, the pods and containers they describe out. No
//! I/O here; the cluster gives each pod its address and runs what this plans.

use anyhow::{Context as _, bail};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// The rendered documents (`helm template`), plus any the test adds (the Secrets the
/// install guide has the user create).
#[derive(Debug, Clone, Default)]
pub struct Objects {
    pub docs: Vec<Value>,
}

/// One pod a workload asks for.
#[derive(Debug, Clone)]
pub struct PodPlan {
    /// `lock-arbiter-0`: workloads' pods are numbered from 0 (Deployments too, where
    /// Kubernetes would add a hash: nothing in the chart may depend on either).
    pub name: String,
    /// `Deployment/lock-arbiter`.
    pub owner: String,
    /// The `helm.sh/hook` annotation of its workload (`post-install`, ...), if any.
    pub hook: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// A StatefulSet's governing Service (its pods' DNS subdomain).
    pub subdomain: Option<String>,
    pub namespace: String,
    /// `restartPolicy`: `Never`/`OnFailure` for Jobs (run to their end).
    pub runs_to_completion: bool,
    /// A StatefulSet's volumeClaimTemplates: a folder of the pod's own, kept across its
    /// restarts, as a bound volume would be.
    pub claims: Vec<String>,
    pub spec: Value,
}

/// An image as a container names it: `REPO/NAME@sha256:...` or `REPO/NAME:TAG`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// The last path segment: the name `make images` gives it.
    pub name: String,
    pub digest: Option<String>,
    pub tag: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    Http {
        port: u16,
        path: String,
        https: bool,
    },
    Tcp {
        port: u16,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub volume: String,
    pub path: String,
    pub sub_path: Option<String>,
    pub read_only: bool,
}

/// One container, as the kubelet would start it.
#[derive(Debug, Clone)]
pub struct ContainerPlan {
    pub name: String,
    pub image: ImageRef,
    /// `command` (replacing the image's entry point), `$(VAR)` expanded.
    pub command: Option<Vec<String>>,
    /// `args`, `$(VAR)` expanded.
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub mounts: Vec<Mount>,
    /// runAsUser / runAsGroup (the container's, else the pod's).
    pub user: Option<(u32, u32)>,
    pub read_only_root: bool,
    pub ports: Vec<(String, u16)>,
    /// Readiness, liveness and startup probes, with the kind each is.
    pub probes: Vec<(String, Probe)>,
}

/// A volume's content, as the pod's containers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Volume {
    /// A ConfigMap's or Secret's keys as files: (relative path, bytes, mode).
    Files(Vec<(String, Vec<u8>, u32)>),
    EmptyDir,
    /// An image volume (the filter's wasm artifact).
    Image(ImageRef),
}

impl Objects {
    /// Every document of a multi-document YAML stream (empty ones skipped).
    pub fn parse(yaml: &str) -> anyhow::Result<Self> {
        let mut docs = Vec::new();
        for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
            let value: Value = serde::Deserialize::deserialize(doc)?;
            if !value.is_null() {
                docs.push(value);
            }
        }
        Ok(Self { docs })
    }

    pub fn push(&mut self, doc: Value) {
        self.docs.push(doc);
    }

    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.docs
            .iter()
            .filter(move |d| d["kind"].as_str() == Some(kind))
    }

    pub fn find(&self, kind: &str, name: &str) -> Option<&Value> {
        self.docs
            .iter()
            .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"] == name)
    }

    fn get(&self, kind: &str, name: &str) -> anyhow::Result<&Value> {
        self.find(kind, name)
            .with_context(|| format!("{kind} {name} is not among the objects"))
    }

    /// The pods every Deployment, StatefulSet and Job asks for, with `namespace` where an
    /// object names none. CronJobs are planned one at a time ([`Self::cron_job`]).
    pub fn pods(&self, namespace: &str) -> anyhow::Result<Vec<PodPlan>> {
        let mut pods = Vec::new();
        for doc in &self.docs {
            let kind = doc["kind"].as_str().unwrap_or_default();
            let name = doc["metadata"]["name"].as_str().unwrap_or_default();
            let replicas = match kind {
                "Deployment" | "StatefulSet" => doc["spec"]["replicas"].as_u64().unwrap_or(1),
                "Job" => 1,
                _ => continue,
            };
            let template = &doc["spec"]["template"];
            for i in 0..replicas {
                pods.push(plan(
                    doc,
                    template,
                    if kind == "Job" {
                        name.to_owned()
                    } else {
                        format!("{name}-{i}")
                    },
                    namespace,
                )?);
            }
        }
        Ok(pods)
    }

    /// One run of a CronJob, as a pod.
    pub fn cron_job(&self, name: &str, namespace: &str) -> anyhow::Result<PodPlan> {
        let doc = self.get("CronJob", name)?;
        plan(
            doc,
            &doc["spec"]["jobTemplate"]["spec"]["template"],
            format!("{name}-run"),
            namespace,
        )
    }

    /// The pod's volumes by name.
    pub fn volumes(&self, pod: &PodPlan) -> anyhow::Result<BTreeMap<String, Volume>> {
        let mut out: BTreeMap<String, Volume> = pod
            .claims
            .iter()
            .map(|c| (c.clone(), Volume::EmptyDir))
            .collect();
        for v in pod.spec["volumes"].as_array().into_iter().flatten() {
            let name = str_of(v, "name")?;
            let volume = if v.get("configMap").is_some() {
                let cm = &v["configMap"];
                let source = self.get("ConfigMap", str_of(cm, "name")?)?;
                files(source, cm, false)?
            } else if v.get("secret").is_some() {
                let s = &v["secret"];
                let source = self.get("Secret", str_of(s, "secretName")?)?;
                files(source, s, true)?
            } else if v.get("emptyDir").is_some() {
                Volume::EmptyDir
            } else if v.get("image").is_some() {
                Volume::Image(image_ref(str_of(&v["image"], "reference")?))
            } else if v.get("projected").is_some() {
                let mut all = Vec::new();
                for s in v["projected"]["sources"].as_array().into_iter().flatten() {
                    let part = if let Some(cm) = s.get("configMap") {
                        files(self.get("ConfigMap", str_of(cm, "name")?)?, cm, false)?
                    } else if let Some(sec) = s.get("secret") {
                        files(self.get("Secret", str_of(sec, "name")?)?, sec, true)?
                    } else {
                        bail!(
                            "pod {}: volume {name}: projected source {s} cannot run here",
                            pod.name
                        )
                    };
                    if let Volume::Files(f) = part {
                        all.extend(f);
                    }
                }
                Volume::Files(all)
            } else {
                bail!(
                    "pod {}: volume {name} ({}) cannot run in the rehearsal: give the chart values that use a Secret, ConfigMap, emptyDir or image volume",
                    pod.name,
                    v
                );
            };
            out.insert(name.to_owned(), volume);
        }
        Ok(out)
    }

    /// The pod's init containers and containers, resolved for a pod at `ip`.
    pub fn containers(
        &self,
        pod: &PodPlan,
        ip: Ipv4Addr,
    ) -> anyhow::Result<(Vec<ContainerPlan>, Vec<ContainerPlan>)> {
        let mut lists = [Vec::new(), Vec::new()];
        for (i, key) in ["initContainers", "containers"].into_iter().enumerate() {
            for c in pod.spec[key].as_array().into_iter().flatten() {
                lists[i].push(self.container(pod, c, ip)?);
            }
        }
        let [init, main] = lists;
        Ok((init, main))
    }

    fn container(&self, pod: &PodPlan, c: &Value, ip: Ipv4Addr) -> anyhow::Result<ContainerPlan> {
        let name = str_of(c, "name")?.to_owned();
        let what = format!("pod {} container {name}", pod.name);
        let mut env: Vec<(String, String)> = Vec::new();
        for e in c["envFrom"].as_array().into_iter().flatten() {
            let (kind, source) = if let Some(s) = e.get("secretRef") {
                ("Secret", s)
            } else if let Some(s) = e.get("configMapRef") {
                ("ConfigMap", s)
            } else {
                bail!("{what}: envFrom {e}");
            };
            let doc = self.get(kind, str_of(source, "name")?)?;
            for (k, v) in data_of(doc, kind == "Secret")? {
                env.push((k, String::from_utf8_lossy(&v).into_owned()));
            }
        }
        for e in c["env"].as_array().into_iter().flatten() {
            let key = str_of(e, "name")?.to_owned();
            let value = if let Some(v) = e.get("value") {
                expand(v.as_str().unwrap_or_default(), &env)
            } else if let Some(from) = e.get("valueFrom") {
                self.value_from(pod, from, ip)
                    .with_context(|| format!("{what}: env {key}"))?
            } else {
                String::new()
            };
            env.push((key, value));
        }
        let strings = |k: &str| -> Option<Vec<String>> {
            c.get(k).and_then(Value::as_array).map(|a| {
                a.iter()
                    .map(|s| expand(s.as_str().unwrap_or_default(), &env))
                    .collect()
            })
        };
        let command = strings("command");
        let args = strings("args").unwrap_or_default();
        let ports: Vec<(String, u16)> = c["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some((
                    p["name"].as_str().unwrap_or_default().to_owned(),
                    u16::try_from(p["containerPort"].as_u64()?).ok()?,
                ))
            })
            .collect();
        let mut probes = Vec::new();
        for kind in ["readinessProbe", "livenessProbe", "startupProbe"] {
            let Some(p) = c.get(kind) else { continue };
            let probe = if let Some(h) = p.get("httpGet") {
                Probe::Http {
                    port: port_of(&h["port"], &ports).with_context(|| format!("{what}: {kind}"))?,
                    path: h["path"].as_str().unwrap_or("/").to_owned(),
                    https: h["scheme"] == "HTTPS",
                }
            } else if let Some(t) = p.get("tcpSocket") {
                Probe::Tcp {
                    port: port_of(&t["port"], &ports).with_context(|| format!("{what}: {kind}"))?,
                }
            } else {
                bail!(
                    "{what}: {kind} {p}: only httpGet and tcpSocket probes can run in images without a shell"
                );
            };
            probes.push((kind.to_owned(), probe));
        }
        let security = |k: &str| {
            c["securityContext"][k]
                .as_u64()
                .or_else(|| pod.spec["securityContext"][k].as_u64())
        };
        let user = match (security("runAsUser"), security("runAsGroup")) {
            (Some(u), g) => Some((u as u32, g.unwrap_or(u) as u32)),
            (None, _) => None,
        };
        let mounts = c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                Ok(Mount {
                    volume: str_of(m, "name")?.to_owned(),
                    path: str_of(m, "mountPath")?.to_owned(),
                    sub_path: m["subPath"].as_str().map(str::to_owned),
                    read_only: m["readOnly"].as_bool().unwrap_or(false),
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(ContainerPlan {
            image: image_ref(str_of(c, "image")?),
            name,
            command,
            args,
            env,
            mounts,
            user,
            read_only_root: c["securityContext"]["readOnlyRootFilesystem"]
                .as_bool()
                .unwrap_or(false),
            ports,
            probes,
        })
    }

    fn value_from(&self, pod: &PodPlan, from: &Value, ip: Ipv4Addr) -> anyhow::Result<String> {
        if let Some(f) = from.get("fieldRef") {
            return Ok(match str_of(f, "fieldPath")? {
                "metadata.name" => pod.name.clone(),
                "metadata.namespace" => pod.namespace.clone(),
                "status.podIP" => ip.to_string(),
                other => bail!("fieldRef {other} is not one the rehearsal knows"),
            });
        }
        for (key, kind, secret) in [
            ("secretKeyRef", "Secret", true),
            ("configMapKeyRef", "ConfigMap", false),
        ] {
            if let Some(r) = from.get(key) {
                let doc = self.get(kind, str_of(r, "name")?)?;
                let want = str_of(r, "key")?;
                return data_of(doc, secret)?
                    .into_iter()
                    .find(|(k, _)| k == want)
                    .map(|(_, v)| String::from_utf8_lossy(&v).into_owned())
                    .with_context(|| {
                        format!("{kind} {} has no key {want}", doc["metadata"]["name"])
                    });
            }
        }
        bail!("valueFrom {from} is not one the rehearsal knows")
    }

    /// Every Service port must reach a port its pods declare: a Service naming a port no
    /// container has is a chart bug (callers by name would find nothing listening).
    pub fn check_services(&self, pods: &[PodPlan]) -> anyhow::Result<()> {
        for svc in self.of_kind("Service") {
            let name = svc["metadata"]["name"].as_str().unwrap_or_default();
            let chosen: Vec<&PodPlan> = pods.iter().filter(|p| selects(svc, p)).collect();
            if chosen.is_empty() {
                continue;
            }
            for port in svc["spec"]["ports"].as_array().into_iter().flatten() {
                let target = port.get("targetPort").unwrap_or(&port["port"]);
                let found = chosen.iter().any(|p| {
                    p.spec["containers"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| {
                            c["ports"].as_array().into_iter().flatten().any(|cp| {
                                cp["containerPort"] == *target
                                    || (target.is_string() && cp["name"] == *target)
                            })
                        })
                });
                if !found {
                    bail!(
                        "Service {name}: port {} (target {target}) is no container port of its pods",
                        port["port"]
                    );
                }
            }
        }
        Ok(())
    }

    /// A pod's own `/etc/hosts`, as the kubelet writes it: localhost and the pod's own
    /// names (its hostname, and a StatefulSet pod's `pod.service.namespace.svc` names).
    /// Everything else resolves through the cluster's DNS.
    pub fn pod_hosts(pod: &PodPlan, ip: Ipv4Addr) -> String {
        let mut names = vec![pod.name.clone()];
        if let Some(sub) = &pod.subdomain {
            names.extend(dns_names(&format!("{}.{sub}", pod.name), &pod.namespace));
        }
        format!("127.0.0.1 localhost\n{ip} {}\n", names.join(" "))
    }

    /// The cluster's names (the DNS server's records, and a client's `/etc/hosts`): each pod's name (and a StatefulSet pod's
    /// `pod.service.namespace.svc` names), and each Service's names, to the addresses of
    /// the pods it selects (glibc returns every address a name has there).
    pub fn hosts(&self, pods: &[(PodPlan, Ipv4Addr)]) -> String {
        let mut lines = vec!["127.0.0.1 localhost".to_owned()];
        for (pod, ip) in pods {
            let mut names = vec![pod.name.clone()];
            if let Some(sub) = &pod.subdomain {
                names.extend(dns_names(&format!("{}.{sub}", pod.name), &pod.namespace));
            }
            lines.push(format!("{ip} {}", names.join(" ")));
        }
        for svc in self.of_kind("Service") {
            let name = svc["metadata"]["name"].as_str().unwrap_or_default();
            let ns = svc["metadata"]["namespace"].as_str();
            for (pod, ip) in pods {
                if selects(svc, pod) && ns.is_none_or(|n| n == pod.namespace) {
                    lines.push(format!(
                        "{ip} {}",
                        dns_names(name, &pod.namespace).join(" ")
                    ));
                }
            }
        }
        lines.join("\n") + "\n"
    }
}

fn dns_names(name: &str, ns: &str) -> Vec<String> {
    vec![
        name.to_owned(),
        format!("{name}.{ns}"),
        format!("{name}.{ns}.svc"),
        format!("{name}.{ns}.svc.cluster.local"),
    ]
}

fn selects(svc: &Value, pod: &PodPlan) -> bool {
    let Some(sel) = svc["spec"]["selector"].as_object() else {
        return false;
    };
    !sel.is_empty()
        && sel
            .iter()
            .all(|(k, v)| pod.labels.get(k).map(String::as_str) == v.as_str())
}

fn plan(doc: &Value, template: &Value, name: String, namespace: &str) -> anyhow::Result<PodPlan> {
    let kind = doc["kind"].as_str().unwrap_or_default();
    let labels = template["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let restart = template["spec"]["restartPolicy"]
        .as_str()
        .unwrap_or("Always");
    Ok(PodPlan {
        owner: format!("{kind}/{}", str_of(&doc["metadata"], "name")?),
        hook: doc["metadata"]["annotations"]["helm.sh/hook"]
            .as_str()
            .map(str::to_owned),
        labels,
        subdomain: (kind == "StatefulSet")
            .then(|| doc["spec"]["serviceName"].as_str().map(str::to_owned))
            .flatten(),
        namespace: doc["metadata"]["namespace"]
            .as_str()
            .unwrap_or(namespace)
            .to_owned(),
        runs_to_completion: restart != "Always",
        claims: doc["spec"]["volumeClaimTemplates"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_owned))
            .collect(),
        spec: template["spec"].clone(),
        name,
    })
}

fn str_of<'a>(v: &'a Value, key: &str) -> anyhow::Result<&'a str> {
    v[key]
        .as_str()
        .with_context(|| format!("{key} missing in {v}"))
}

/// A ConfigMap's or Secret's keys (Secret `data` is base64; `stringData` and ConfigMap
/// `data` are text; `binaryData` is base64).
fn data_of(doc: &Value, secret: bool) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    let b64 = |s: &str| base64_decode(s).context("base64");
    for (section, encoded) in [
        ("data", secret),
        ("stringData", false),
        ("binaryData", true),
    ] {
        for (k, v) in doc[section].as_object().into_iter().flatten() {
            let text = v.as_str().unwrap_or_default();
            out.push((
                k.clone(),
                if encoded {
                    b64(text)?
                } else {
                    text.as_bytes().to_vec()
                },
            ));
        }
    }
    Ok(out)
}

fn files(doc: &Value, source: &Value, secret: bool) -> anyhow::Result<Volume> {
    let mode = source["defaultMode"].as_u64().unwrap_or(0o644) as u32;
    let data = data_of(doc, secret)?;
    let Some(items) = source["items"].as_array() else {
        return Ok(Volume::Files(
            data.into_iter().map(|(k, v)| (k, v, mode)).collect(),
        ));
    };
    let mut out = Vec::new();
    for item in items {
        let key = str_of(item, "key")?;
        let (_, bytes) = data
            .iter()
            .find(|(k, _)| k == key)
            .with_context(|| format!("{} has no key {key}", doc["metadata"]["name"]))?;
        let m = item["mode"].as_u64().map_or(mode, |m| m as u32);
        out.push((str_of(item, "path")?.to_owned(), bytes.clone(), m));
    }
    Ok(Volume::Files(out))
}

fn port_of(port: &Value, ports: &[(String, u16)]) -> anyhow::Result<u16> {
    if let Some(n) = port.as_u64() {
        return u16::try_from(n).context("port out of range");
    }
    let name = port.as_str().unwrap_or_default();
    ports
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, p)| *p)
        .with_context(|| format!("the probe's port {name:?} is no port of the container"))
}

/// `REPO/NAME@sha256:...`, `REPO/NAME:TAG` or `REPO/NAME:TAG@sha256:...`.
pub fn image_ref(image: &str) -> ImageRef {
    let (rest, digest) = match image.split_once('@') {
        Some((r, d)) => (r, Some(d.to_owned())),
        None => (image, None),
    };
    let last = rest.rsplit('/').next().unwrap_or(rest);
    let (name, tag) = match last.split_once(':') {
        Some((n, t)) => (n.to_owned(), Some(t.to_owned())),
        None => (last.to_owned(), None),
    };
    ImageRef { name, digest, tag }
}

/// Kubernetes' `$(VAR)` expansion of a command, an argument or an env value, from the
/// variables defined before it: a reference to an undefined variable stays as written,
/// and `$$` is a literal `$`.
pub fn expand(text: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match env.iter().rev().find(|(k, _)| k == name) {
                Some((_, v)) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn base64_decode(s: &str) -> anyhow::Result<Vec<u8>> {
    use base64::Engine as _;
    Ok(base64::engine::general_purpose::STANDARD.decode(s.trim())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_follows_kubernetes() {
        let env = vec![
            ("POD_NAME".to_owned(), "lock-etcd-1".to_owned()),
            ("NS".to_owned(), "lock".to_owned()),
        ];
        for (given, want) in [
            ("--name=$(POD_NAME)", "--name=lock-etcd-1"),
            ("$(POD_NAME).x.$(NS).svc", "lock-etcd-1.x.lock.svc"),
            ("$(MISSING)", "$(MISSING)"),
            ("$$(POD_NAME)", "$(POD_NAME)"),
            ("a$b", "a$b"),
            ("$(unterminated", "$(unterminated"),
            ("", ""),
        ] {
            assert_eq!(expand(given, &env), want, "{given}");
        }
    }

    #[test]
    fn image_references() {
        for (given, name, tag, digest) in [
            (
                "ghcr.io/fenced-lock/fenced-lock-arbiter:0.1.0",
                "fenced-lock-arbiter",
                Some("0.1.0"),
                None,
            ),
            (
                "r.example:5000/a/fenced-lock-admin@sha256:ab",
                "fenced-lock-admin",
                None,
                Some("sha256:ab"),
            ),
            (
                "x/fenced-lock-audit:1@sha256:cd",
                "fenced-lock-audit",
                Some("1"),
                Some("sha256:cd"),
            ),
            ("envoy", "envoy", None, None),
        ] {
            let r = image_ref(given);
            assert_eq!(
                (r.name.as_str(), r.tag.as_deref(), r.digest.as_deref()),
                (name, tag, digest),
                "{given}"
            );
        }
    }

    const RENDERED: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: lock-etcd, namespace: lock}
spec:
  clusterIP: None
  selector: {app: etcd}
  ports: [{name: client, port: 2379}]
---
apiVersion: v1
kind: Secret
metadata: {name: etcd-tls}
data: {tls.crt: Y2VydA==}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: conf}
data: {a.conf: "x=1", b.conf: "y=2"}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: lock-etcd, namespace: lock}
spec:
  replicas: 2
  serviceName: lock-etcd
  template:
    metadata: {labels: {app: etcd}}
    spec:
      securityContext: {runAsUser: 65532}
      containers:
      - name: etcd
        image: reg/fenced-lock-test-etcd@sha256:aa
        command: [/usr/local/bin/etcd, --name=$(POD_NAME)]
        env:
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        - {name: URL, value: "https://$(POD_NAME).lock-etcd:2379"}
        - name: CERT
          valueFrom: {secretKeyRef: {name: etcd-tls, key: tls.crt}}
        ports: [{name: client, containerPort: 2379}]
        readinessProbe: {httpGet: {path: /health, port: client}}
        securityContext: {readOnlyRootFilesystem: true, runAsGroup: 7}
        volumeMounts: [{name: conf, mountPath: /etc/c, readOnly: true}]
      volumes:
      - name: conf
        configMap: {name: conf, items: [{key: b.conf, path: only.conf}]}
"#;

    #[test]
    fn a_statefulset_becomes_numbered_pods_with_resolved_containers() {
        let objects = Objects::parse(RENDERED).unwrap();
        let pods = objects.pods("lock").unwrap();
        assert_eq!(
            pods.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            ["lock-etcd-0", "lock-etcd-1"]
        );
        objects.check_services(&pods).unwrap();
        let ip = Ipv4Addr::new(198, 18, 0, 2);
        let (init, main) = objects.containers(&pods[1], ip).unwrap();
        assert!(init.is_empty());
        let c = &main[0];
        assert_eq!(c.command.as_ref().unwrap()[1], "--name=lock-etcd-1");
        assert_eq!(c.env[1].1, "https://lock-etcd-1.lock-etcd:2379");
        assert_eq!(c.env[2].1, "cert");
        assert_eq!(c.user, Some((65532, 7)));
        assert!(c.read_only_root);
        assert_eq!(
            c.probes,
            vec![(
                "readinessProbe".to_owned(),
                Probe::Http {
                    port: 2379,
                    path: "/health".into(),
                    https: false
                }
            )]
        );
        assert_eq!(c.image.digest.as_deref(), Some("sha256:aa"));
        let volumes = objects.volumes(&pods[1]).unwrap();
        assert_eq!(
            volumes["conf"],
            Volume::Files(vec![("only.conf".into(), b"y=2".to_vec(), 0o644)])
        );
        let hosts = objects.hosts(&[
            (pods[0].clone(), Ipv4Addr::new(198, 18, 0, 1)),
            (pods[1].clone(), ip),
        ]);
        assert!(hosts.contains("198.18.0.2 lock-etcd-1 lock-etcd-1.lock-etcd lock-etcd-1.lock-etcd.lock lock-etcd-1.lock-etcd.lock.svc"), "{hosts}");
        assert!(
            hosts.contains("198.18.0.1 lock-etcd lock-etcd.lock"),
            "{hosts}"
        );
    }

    #[test]
    fn what_cannot_run_here_is_an_error_naming_it() {
        for (from, to, says) in [
            ("port: client}}", "port: peer}}", "no port of the container"),
            (
                "ports: [{name: client, port: 2379}]",
                "ports: [{name: client, port: 2380}]",
                "Service lock-etcd: port 2380",
            ),
            (
                "configMap: {name: conf, items",
                "csi: {driver: csi.spiffe.io, items",
                "cannot run in the rehearsal",
            ),
            ("key: tls.crt}}", "key: tls.key}}", "has no key tls.key"),
            (
                "fieldPath: metadata.name",
                "fieldPath: spec.nodeName",
                "spec.nodeName",
            ),
        ] {
            let broken = RENDERED.replace(from, to);
            assert_ne!(broken, RENDERED, "{from}");
            let objects = Objects::parse(&broken).unwrap();
            let pods = objects.pods("lock").unwrap();
            let err = objects
                .check_services(&pods)
                .and_then(|()| {
                    objects
                        .containers(&pods[0], Ipv4Addr::LOCALHOST)
                        .map(|_| ())
                })
                .and_then(|()| objects.volumes(&pods[0]).map(|_| ()))
                .unwrap_err();
            assert!(format!("{err:#}").contains(says), "{from}: {err:#}");
        }
    }
}
