//! The registry as Kubernetes resources (ADR-24, issue 23 item 4): `crd.rs` generates the
//! CustomResourceDefinitions from the document types; `admission.rs` decides an
//! AdmissionReview with the registry's one validation (pure); `server.rs` is the webhook's
//! HTTPS listener (bin `lock-webhook`); `sync/` watches the resources and writes the
//! arbiters' registry folder (bin `lock-registry-sync`).

pub mod admission;
pub mod crd;
pub mod server;
pub mod sync;
