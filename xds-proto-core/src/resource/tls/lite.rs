//! Decode-only views of the TLS transport socket messages
//! (`envoy.extensions.transport_sockets.tls.v3`), as `cluster/lite.rs` does for CDS: only
//! the fields A29, A82 and A101 read or NACK, by their real numbers. A field gRPC
//! ignores (ALPN, session tickets, `trusted_ca`, ...) is not declared, so prost skips it
//! on the wire; a field whose mere presence is NACKed decodes into `Skipped`. The
//! structs are named after the Envoy messages, so decode errors name the same messages.

use crate::pb::envoy::r#type::matcher::v3 as matcher_pb;
use crate::pb::google::protobuf::BoolValue;
use crate::resource::cluster::lite::Skipped;

/// `UpstreamTlsContext`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UpstreamTlsContext {
    #[prost(message, optional, tag = "1")]
    pub common_tls_context: Option<CommonTlsContext>,
    #[prost(string, tag = "2")]
    pub sni: String,
    #[prost(bool, tag = "6")]
    pub auto_host_sni: bool,
    #[prost(bool, tag = "7")]
    pub auto_sni_san_validation: bool,
}

/// `DownstreamTlsContext`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DownstreamTlsContext {
    #[prost(message, optional, tag = "1")]
    pub common_tls_context: Option<CommonTlsContext>,
    #[prost(message, optional, tag = "2")]
    pub require_client_certificate: Option<BoolValue>,
    #[prost(message, optional, tag = "3")]
    pub require_sni: Option<BoolValue>,
    /// `DownstreamTlsContext.OcspStaplePolicy`; 0 is `LENIENT_STAPLING`.
    #[prost(int32, tag = "8")]
    pub ocsp_staple_policy: i32,
}

/// `CommonTlsContext`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CommonTlsContext {
    #[prost(message, optional, tag = "1")]
    pub tls_params: Option<Skipped>,
    #[prost(message, repeated, tag = "2")]
    pub tls_certificates: Vec<Skipped>,
    #[prost(message, repeated, tag = "6")]
    pub tls_certificate_sds_secret_configs: Vec<Skipped>,
    /// Deprecated `CertificateProviderInstance`, the same two fields as the plugin
    /// instance.
    #[prost(message, optional, tag = "11")]
    pub tls_certificate_certificate_provider_instance: Option<CertificateProviderPluginInstance>,
    #[prost(message, optional, tag = "13")]
    pub custom_handshaker: Option<Skipped>,
    #[prost(message, optional, tag = "14")]
    pub tls_certificate_provider_instance: Option<CertificateProviderPluginInstance>,
    #[prost(
        oneof = "common_tls_context::ValidationContextType",
        tags = "3, 7, 8, 10, 12"
    )]
    pub validation_context_type: Option<common_tls_context::ValidationContextType>,
}

/// Oneofs of [`CommonTlsContext`].
pub mod common_tls_context {
    use super::{
        CertificateProviderPluginInstance, CertificateValidationContext,
        CombinedCertificateValidationContext, Skipped,
    };

    /// `validation_context_type`.
    #[allow(clippy::enum_variant_names, clippy::large_enum_variant)] // Envoy's names
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum ValidationContextType {
        #[prost(message, tag = "3")]
        ValidationContext(CertificateValidationContext),
        #[prost(message, tag = "7")]
        ValidationContextSdsSecretConfig(Skipped),
        #[prost(message, tag = "8")]
        CombinedValidationContext(CombinedCertificateValidationContext),
        /// Deprecated `CertificateProvider` (an inline provider config).
        #[prost(message, tag = "10")]
        ValidationContextCertificateProvider(Skipped),
        /// Deprecated `CertificateProviderInstance`.
        #[prost(message, tag = "12")]
        ValidationContextCertificateProviderInstance(CertificateProviderPluginInstance),
    }
}

/// `CommonTlsContext.CombinedCertificateValidationContext`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CombinedCertificateValidationContext {
    #[prost(message, optional, tag = "1")]
    pub default_validation_context: Option<CertificateValidationContext>,
    /// Deprecated `CertificateProviderInstance`.
    #[prost(message, optional, tag = "4")]
    pub validation_context_certificate_provider_instance: Option<CertificateProviderPluginInstance>,
}

/// `CertificateValidationContext`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CertificateValidationContext {
    #[prost(string, repeated, tag = "2")]
    pub verify_certificate_hash: Vec<String>,
    #[prost(string, repeated, tag = "3")]
    pub verify_certificate_spki: Vec<String>,
    #[prost(message, optional, tag = "6")]
    pub require_signed_certificate_timestamp: Option<BoolValue>,
    #[prost(message, optional, tag = "7")]
    pub crl: Option<Skipped>,
    #[prost(message, repeated, tag = "9")]
    pub match_subject_alt_names: Vec<matcher_pb::StringMatcher>,
    #[prost(message, optional, tag = "12")]
    pub custom_validator_config: Option<Skipped>,
    #[prost(message, optional, tag = "13")]
    pub ca_certificate_provider_instance: Option<CertificateProviderPluginInstance>,
    /// `SubjectAltNameMatcher`s: only whether there are any.
    #[prost(message, repeated, tag = "15")]
    pub match_typed_subject_alt_names: Vec<Skipped>,
    #[prost(message, optional, tag = "17")]
    pub system_root_certs: Option<Skipped>,
}

/// `CertificateProviderPluginInstance` (and the deprecated
/// `CommonTlsContext.CertificateProviderInstance`, whose fields are the same).
#[derive(Clone, PartialEq, prost::Message)]
pub struct CertificateProviderPluginInstance {
    #[prost(string, tag = "1")]
    pub instance_name: String,
    #[prost(string, tag = "2")]
    pub certificate_name: String,
}
