//! gRFC A29's validation of TLS transport sockets, shared by CDS (a cluster's
//! `UpstreamTlsContext`, into [`UpstreamTls`]) and LDS (a server filter chain's
//! `DownstreamTlsContext`, into [`DownstreamTls`]), with A82's `system_root_certs` and
//! A101's SNI fields.
//!
//! What gRPC NACKs is NACKed here with the field's path (`tls_params`,
//! `custom_handshaker`, SDS and inline certificates, `verify_certificate_spki`/`_hash`,
//! `require_signed_certificate_timestamp`, `crl`, `custom_validator_config`, a client
//! without roots, a server without an identity, `require_sni`, an OCSP policy other than
//! lenient, a provider instance the bootstrap lacks); what it ignores is not decoded
//! (`lite` leaves it out). Where gRPC-Go and C-core differ, and the one NACK of ours
//! (typed SAN matchers alone), see the `security` module.

use super::DecodeContext;
use super::route::{StringMatcher, parse_string_matcher};
use super::validate::{FieldError, decode_message, typed_config};
use crate::pb::google::protobuf as pbuf;
use crate::security::{
    CertificateProviderInstance, DownstreamTls, MAX_SNI_LEN, RootCertificates, UpstreamTls,
};
use lite::common_tls_context::ValidationContextType;

/// Type name of `UpstreamTlsContext`, the only transport socket config a cluster may have.
pub const UPSTREAM_TLS_CONTEXT_TYPE: &str =
    "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";

/// Type name of `DownstreamTlsContext`, the only transport socket config a server filter
/// chain may have.
pub const DOWNSTREAM_TLS_CONTEXT_TYPE: &str =
    "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext";

/// The message of a field whose presence is NACKed.
const UNSUPPORTED: &str = "not supported (A29: ignoring it would weaken security)";

/// Checks a transport socket's `typed_config` (its type URL and value) against the one
/// type accepted. Paths are relative to `typed_config`. Any prefix before the last `/`
/// is accepted; a `TypedStruct` or another type is refused with `typed_config`'s own
/// errors or "unsupported transport socket type".
pub(super) fn check_socket_type(
    type_url: &str,
    value: &[u8],
    expected: &str,
) -> Result<(), FieldError> {
    if type_url
        .rsplit_once('/')
        .is_some_and(|(_, name)| name == expected)
    {
        return Ok(());
    }
    let any = pbuf::Any {
        type_url: type_url.to_owned(),
        value: value.to_vec().into(),
    };
    let config = typed_config(&any)?;
    Err(FieldError::new(
        "type_url",
        format!("unsupported transport socket type {:?}", config.type_url),
    ))
}

/// A serialized `UpstreamTlsContext` (paths relative to it).
pub(super) fn parse_upstream(
    context: &DecodeContext<'_>,
    bytes: &[u8],
) -> Result<UpstreamTls, FieldError> {
    let tls: lite::UpstreamTlsContext = decode_message(bytes, "", "UpstreamTlsContext")?;
    let Some(common) = tls.common_tls_context else {
        return Err(FieldError::missing("common_tls_context"));
    };
    let common = parse_common(context, common).map_err(|e| e.at("common_tls_context"))?;
    let validation = common.validation.ok_or_else(|| no_roots(None))?;
    let roots = validation
        .roots
        .ok_or_else(|| no_roots(Some(validation.path)))?;
    if tls.sni.len() > MAX_SNI_LEN {
        return Err(FieldError::new(
            "sni",
            format!("must be at most {MAX_SNI_LEN} bytes, got {}", tls.sni.len()),
        ));
    }
    Ok(UpstreamTls {
        identity: common.identity,
        roots,
        match_subject_alt_names: validation.match_subject_alt_names,
        sni: (!tls.sni.is_empty()).then(|| tls.sni.into_boxed_str()),
        auto_host_sni: tls.auto_host_sni,
        auto_sni_san_validation: tls.auto_sni_san_validation,
    })
}

/// The NACK of a client without roots; `path` is that of its validation context.
fn no_roots(path: Option<&str>) -> FieldError {
    let message = "a client needs root certificates: set ca_certificate_provider_instance \
                   or system_root_certs in the validation context";
    match path {
        Some(path) => FieldError::new(path, message).at("common_tls_context"),
        None => FieldError::new(
            "common_tls_context",
            format!("no validation context: {message}"),
        ),
    }
}

/// A serialized `DownstreamTlsContext` (paths relative to it).
pub(super) fn parse_downstream(
    context: &DecodeContext<'_>,
    bytes: &[u8],
) -> Result<DownstreamTls, FieldError> {
    let tls: lite::DownstreamTlsContext = decode_message(bytes, "", "DownstreamTlsContext")?;
    let common = match tls.common_tls_context {
        Some(common) => parse_common(context, common).map_err(|e| e.at("common_tls_context"))?,
        None => CommonTls {
            identity: None,
            validation: None,
        },
    };
    let identity = common.identity.ok_or_else(|| {
        FieldError::new(
            "common_tls_context.tls_certificate_provider_instance",
            "field not present: a server needs an identity certificate",
        )
    })?;
    let client_roots = match common.validation {
        None => None,
        Some(v) => Some(v.server_roots().map_err(|e| e.at("common_tls_context"))?),
    };
    let require_client_certificate = tls.require_client_certificate.is_some_and(|b| b.value);
    if require_client_certificate && client_roots.is_none() {
        return Err(FieldError::new(
            "require_client_certificate",
            "a client certificate is required but there is no validation context to verify \
             it with",
        ));
    }
    if tls.require_sni.is_some_and(|b| b.value) {
        return Err(FieldError::new("require_sni", UNSUPPORTED));
    }
    if tls.ocsp_staple_policy != 0 {
        return Err(FieldError::new(
            "ocsp_staple_policy",
            format!(
                "must be LENIENT_STAPLING, got {}",
                ocsp_policy_name(tls.ocsp_staple_policy)
            ),
        ));
    }
    Ok(DownstreamTls {
        identity,
        client_roots,
        require_client_certificate,
    })
}

fn ocsp_policy_name(value: i32) -> String {
    match value {
        1 => "STRICT_STAPLING".into(),
        2 => "MUST_STAPLE".into(),
        other => other.to_string(),
    }
}

/// What both sides take from a `CommonTlsContext`.
struct CommonTls {
    identity: Option<CertificateProviderInstance>,
    /// `None` when no validation context is set.
    validation: Option<ValidationContext>,
}

/// A validation context: its roots, matchers, and its path (relative to the
/// `CommonTlsContext`) for the server's errors.
struct ValidationContext {
    path: &'static str,
    roots: Option<RootCertificates>,
    match_subject_alt_names: Box<[StringMatcher]>,
}

impl ValidationContext {
    fn empty(path: &'static str) -> ValidationContext {
        ValidationContext {
            path,
            roots: None,
            match_subject_alt_names: Box::default(),
        }
    }

    /// The roots of a server's validation context, which must be a provider instance
    /// (A29); servers support neither SAN matchers nor system roots (A82). Paths are
    /// relative to the `CommonTlsContext`.
    fn server_roots(self) -> Result<CertificateProviderInstance, FieldError> {
        let error =
            |field: &str, message: &str| FieldError::new(format!("{}.{field}", self.path), message);
        if !self.match_subject_alt_names.is_empty() {
            return Err(error("match_subject_alt_names", "not supported on servers"));
        }
        match self.roots {
            Some(RootCertificates::Provider(p)) => Ok(p),
            Some(RootCertificates::System) => {
                Err(error("system_root_certs", "not supported on servers (A82)"))
            }
            None => Err(error(
                "ca_certificate_provider_instance",
                "field not present: a server that validates client certificates needs it",
            )),
        }
    }
}

/// A `CommonTlsContext` (paths relative to it).
fn parse_common(
    context: &DecodeContext<'_>,
    mut common: lite::CommonTlsContext,
) -> Result<CommonTls, FieldError> {
    if common.tls_params.is_some() {
        return Err(FieldError::new("tls_params", UNSUPPORTED));
    }
    if common.custom_handshaker.is_some() {
        return Err(FieldError::new("custom_handshaker", UNSUPPORTED));
    }
    let identity = parse_identity(context, &mut common)?;
    let validation = match common.validation_context_type {
        None => None,
        Some(ValidationContextType::ValidationContext(vc)) => Some(
            parse_validation_context(context, vc, "validation_context")
                .map_err(|e| e.at("validation_context"))?,
        ),
        Some(ValidationContextType::CombinedValidationContext(combined)) => {
            Some(parse_combined(context, combined)?)
        }
        Some(ValidationContextType::ValidationContextCertificateProviderInstance(p)) => {
            let path = "validation_context_certificate_provider_instance";
            let mut vc = ValidationContext::empty(path);
            vc.roots = Some(RootCertificates::Provider(
                provider_instance(context, p).map_err(|e| e.at(path))?,
            ));
            Some(vc)
        }
        Some(ValidationContextType::ValidationContextSdsSecretConfig(_)) => {
            return Err(FieldError::new(
                "validation_context_sds_secret_config",
                UNSUPPORTED,
            ));
        }
        Some(ValidationContextType::ValidationContextCertificateProvider(_)) => {
            return Err(FieldError::new(
                "validation_context_certificate_provider",
                UNSUPPORTED,
            ));
        }
    };
    Ok(CommonTls {
        identity,
        validation,
    })
}

/// The identity: `tls_certificate_provider_instance`, else the deprecated
/// `tls_certificate_certificate_provider_instance`; inline or SDS certificates without
/// either are NACKed.
fn parse_identity(
    context: &DecodeContext<'_>,
    common: &mut lite::CommonTlsContext,
) -> Result<Option<CertificateProviderInstance>, FieldError> {
    let (field, instance) = match (
        common.tls_certificate_provider_instance.take(),
        common.tls_certificate_certificate_provider_instance.take(),
    ) {
        (Some(p), _) => ("tls_certificate_provider_instance", p),
        (None, Some(p)) => ("tls_certificate_certificate_provider_instance", p),
        (None, None) => {
            if !common.tls_certificates.is_empty() {
                return Err(FieldError::new("tls_certificates", UNSUPPORTED));
            }
            if !common.tls_certificate_sds_secret_configs.is_empty() {
                return Err(FieldError::new(
                    "tls_certificate_sds_secret_configs",
                    UNSUPPORTED,
                ));
            }
            return Ok(None);
        }
    };
    provider_instance(context, instance)
        .map(Some)
        .map_err(|e| e.at(field))
}

/// `combined_validation_context` (paths relative to the `CommonTlsContext`): its
/// `default_validation_context`, whose roots fall back to the deprecated
/// `validation_context_certificate_provider_instance` when it names no provider (as
/// C-core does; Istio's proxyless clusters send the roots there).
fn parse_combined(
    context: &DecodeContext<'_>,
    combined: lite::CombinedCertificateValidationContext,
) -> Result<ValidationContext, FieldError> {
    let path = "combined_validation_context.default_validation_context";
    let mut vc = match combined.default_validation_context {
        Some(d) => parse_validation_context(context, d, path).map_err(|e| e.at(path))?,
        None => ValidationContext::empty("combined_validation_context"),
    };
    if !matches!(vc.roots, Some(RootCertificates::Provider(_)))
        && let Some(legacy) = combined.validation_context_certificate_provider_instance
    {
        let field = "combined_validation_context.validation_context_certificate_provider_instance";
        vc.roots = Some(RootCertificates::Provider(
            provider_instance(context, legacy).map_err(|e| e.at(field))?,
        ));
    }
    Ok(vc)
}

/// A `CertificateValidationContext` (paths relative to it); `path` is where it sits in
/// the `CommonTlsContext`.
fn parse_validation_context(
    context: &DecodeContext<'_>,
    vc: lite::CertificateValidationContext,
    path: &'static str,
) -> Result<ValidationContext, FieldError> {
    if !vc.verify_certificate_spki.is_empty() {
        return Err(FieldError::new("verify_certificate_spki", UNSUPPORTED));
    }
    if !vc.verify_certificate_hash.is_empty() {
        return Err(FieldError::new("verify_certificate_hash", UNSUPPORTED));
    }
    if vc
        .require_signed_certificate_timestamp
        .is_some_and(|b| b.value)
    {
        return Err(FieldError::new(
            "require_signed_certificate_timestamp",
            UNSUPPORTED,
        ));
    }
    if vc.crl.is_some() {
        return Err(FieldError::new("crl", UNSUPPORTED));
    }
    if vc.custom_validator_config.is_some() {
        return Err(FieldError::new("custom_validator_config", UNSUPPORTED));
    }
    if !vc.match_typed_subject_alt_names.is_empty() && vc.match_subject_alt_names.is_empty() {
        // gRPC reads only match_subject_alt_names (C-core and Go ignore the typed
        // matchers, Java documents them as not working): alone, ignoring them would skip
        // the SAN check the control plane asked for. Beside untyped matchers (a config
        // written for Envoy and gRPC alike), they are ignored as gRPC does.
        return Err(FieldError::new(
            "match_typed_subject_alt_names",
            "not supported (gRPC reads match_subject_alt_names; ignoring these alone would \
             skip the SAN check)",
        ));
    }
    let match_subject_alt_names = vc
        .match_subject_alt_names
        .iter()
        .enumerate()
        .map(|(i, m)| parse_string_matcher(m).map_err(|e| e.at_index("match_subject_alt_names", i)))
        .collect::<Result<Box<[_]>, _>>()?;
    let roots = match (vc.ca_certificate_provider_instance, vc.system_root_certs) {
        (Some(p), _) => Some(RootCertificates::Provider(
            provider_instance(context, p).map_err(|e| e.at("ca_certificate_provider_instance"))?,
        )),
        (None, Some(_)) => Some(RootCertificates::System),
        (None, None) => None,
    };
    Ok(ValidationContext {
        path,
        roots,
        match_subject_alt_names,
    })
}

/// A provider instance whose name the context accepts (paths relative to it).
fn provider_instance(
    context: &DecodeContext<'_>,
    p: lite::CertificateProviderPluginInstance,
) -> Result<CertificateProviderInstance, FieldError> {
    let instance_name = context
        .certificate_provider(&p.instance_name)
        .map_err(|reason| FieldError::new("instance_name", reason))?;
    Ok(CertificateProviderInstance {
        instance_name,
        certificate_name: p.certificate_name.into_boxed_str(),
    })
}

/// A `StringMatcher` as a SAN matcher (for tests outside `resource` that need one,
/// safe_regex included).
#[cfg(test)]
pub(crate) fn san_matcher(
    m: &crate::pb::envoy::r#type::matcher::v3::StringMatcher,
) -> Result<StringMatcher, String> {
    parse_string_matcher(m).map_err(|e| e.to_string())
}

/// Decode-only views of the TLS messages.
pub(super) mod lite;

#[cfg(test)]
mod tests;
