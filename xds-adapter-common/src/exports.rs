//! What every runtime adapter (`xds-adapter-tokio`, `xds-adapter-async-std`)
//! re-exports at its root, one list for all: each does
//! `pub use xds_adapter_common::exports::*;` and adds only its runtime's type aliases
//! (`Client`, `ClientPool`, `XdsChannel`, ...) and whatever is its own.

pub use crate::metrics;
/// ORCA for servers (gRFC A51): the metric recorders and the per-call report layer; the
/// out-of-band service on a runtime is its adapter's `OrcaService`.
pub use crate::orca::{
    CallMetricRecorder, DEFAULT_MIN_REPORT_INTERVAL, OrcaBody, OrcaLayer, OrcaMiddleware,
    ServerMetricRecorder,
};
pub use crate::security::{CertificateProviders, FallbackCredentials, XdsServerCredentials};
pub use crate::{
    CHANNEL_EVENT_BUFFER, ChannelEvent, ChannelEventStream, ConfigResult, ConfigStream,
    ConfigUpdate, DEFAULT_CONNECT_TIMEOUT, DEFAULT_KEEPALIVE_INTERVAL, DEFAULT_KEEPALIVE_TIMEOUT,
    DEFAULT_MAX_RECEIVE_MESSAGE_SIZE, DeltaSent, Error, KeepaliveSettings, RawWatchStream,
    ResponseBody, Runtime, SERVER_TARGET, TransportSettings, WatchStream, WatchUpdate,
    load_bootstrap_from_env,
};
pub use xds_proto_core;
pub use xds_proto_core::bootstrap::{Bootstrap, BootstrapError};
pub use xds_proto_core::dependency::XdsConfig;
pub use xds_proto_core::resource::{Cds, Eds, Lds, Rds};
pub use xds_proto_core::selector::{ClusterHandle, ConfigSelector, Selection};
