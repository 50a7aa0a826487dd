//! The rehearsal: the chart's rendered objects run as pods of the built images under runc,
//! a small kubelet for one test. What it does, file by file:
//!
//! - `objects`: pure. The rendered documents in; the pods they describe out (one per
//!   replica, ordinals for Deployments and StatefulSets alike), each container's argv with
//!   `$(VAR)` expanded, its environment resolved (values, `fieldRef`, `secretKeyRef`,
//!   `configMapKeyRef`), its volumes as files, and the `/etc/hosts` that makes every
//!   Service and StatefulSet pod name resolve to its pods. Anything it cannot run as
//!   Kubernetes would (a CSI volume, an exec probe in an image without a shell) is an error
//!   naming the object, never a silent skip.
//! - `runc`: a container's bundle: the image's unpacked root (read-only, shared), the
//!   pod's network namespace, its hostname, the user from the securityContext, each volume
//!   as a bind mount, /etc/hosts; then `runc run`, its output in a log file.
//! - `cluster`: the pods together. One network namespace per pod on one bridge
//!   ([`crate::netlab`]); init containers to completion first, then the containers; every
//!   httpGet/tcpSocket probe checked against the running pod's address and port; a pod
//!   killed as a node would lose it; Jobs run to their exit code.
//!
//! What it does not do: schedule (affinity and spread are the chart's promise to a real
//! scheduler, checked by the schema tests), restart crashed containers, or route a
//! Service's port to another target port (a Service must expose its pods' own port to
//! be reached by name here, and the cluster refuses one that names no container port).

pub mod cluster;
pub mod objects;
pub mod runc;

pub use cluster::{Cluster, RunningPod};
pub use objects::{Objects, PodPlan};
