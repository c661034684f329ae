//! Reading the bootstrap JSON: paths into the document (`xds_servers[1].server_uri`,
//! `authorities["a.example"]`) and typed field access that fails with the field's path
//! and what it should have been.

use serde_json::{Map, Value};

use super::{BootstrapError, BootstrapErrorKind};

pub(super) type Object = Map<String, Value>;

/// `s` as a JSON string literal, quotes and escapes included.
pub(super) fn quote(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

/// The path of the field `name` of the object at `path`.
pub(super) fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// The path of element `i` of the array at `path`.
pub(super) fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// The path of the entry `key` of the map at `path`.
pub(super) fn keyed(path: &str, key: &str) -> String {
    format!("{path}[{}]", quote(key))
}

/// The JSON type of `value`, as errors name it.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn wrong_type(path: &str, expected: &'static str, value: &Value) -> BootstrapError {
    BootstrapError::new(
        path,
        BootstrapErrorKind::WrongType {
            expected,
            found: type_name(value),
        },
    )
}

/// `value` as an object, or a wrong-type error at `path`.
pub(super) fn as_object<'a>(value: &'a Value, path: &str) -> Result<&'a Object, BootstrapError> {
    value
        .as_object()
        .ok_or_else(|| wrong_type(path, "object", value))
}

/// `value` as an array, or a wrong-type error at `path`.
pub(super) fn as_array<'a>(value: &'a Value, path: &str) -> Result<&'a [Value], BootstrapError> {
    match value {
        Value::Array(items) => Ok(items),
        _ => Err(wrong_type(path, "array", value)),
    }
}

/// `value` as a string, or a wrong-type error at `path`.
pub(super) fn as_string<'a>(value: &'a Value, path: &str) -> Result<&'a str, BootstrapError> {
    value
        .as_str()
        .ok_or_else(|| wrong_type(path, "string", value))
}

/// The optional string field `name` of `obj` (at `path`).
pub(super) fn opt_string(
    obj: &Object,
    path: &str,
    name: &str,
) -> Result<Option<String>, BootstrapError> {
    obj.get(name)
        .map(|v| as_string(v, &child(path, name)).map(str::to_owned))
        .transpose()
}

/// The optional object field `name` of `obj` (at `path`).
pub(super) fn opt_object<'a>(
    obj: &'a Object,
    path: &str,
    name: &str,
) -> Result<Option<&'a Object>, BootstrapError> {
    obj.get(name)
        .map(|v| as_object(v, &child(path, name)))
        .transpose()
}

/// A string field that must be present and non-empty.
pub(super) fn required_string(
    obj: &Object,
    path: &str,
    name: &str,
) -> Result<String, BootstrapError> {
    let field_path = child(path, name);
    match opt_string(obj, path, name)? {
        None => Err(BootstrapError::new(field_path, BootstrapErrorKind::Missing)),
        Some(s) if s.is_empty() => Err(BootstrapError::new(field_path, BootstrapErrorKind::Empty)),
        Some(s) => Ok(s),
    }
}

/// An optional string field that, when present, must be non-empty.
pub(super) fn opt_non_empty_string(
    obj: &Object,
    path: &str,
    name: &str,
) -> Result<Option<String>, BootstrapError> {
    match opt_string(obj, path, name)? {
        Some(s) if s.is_empty() => Err(BootstrapError::new(
            child(path, name),
            BootstrapErrorKind::Empty,
        )),
        other => Ok(other),
    }
}
