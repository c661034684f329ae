//! HTTP filters (gRFC A39): each filter's config parsed once, when its resource is
//! decoded, its per-route overrides merged as A39 says, and per-RPC decisions handed to
//! the runtime that carries the RPC. Client filters: fault injection (A33), stateful
//! session affinity (A55, A60); server filter: RBAC (A41). `gcp_authn` (A83) is
//! accepted and not run.

pub mod rbac;
