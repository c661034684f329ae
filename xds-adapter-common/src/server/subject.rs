//! A peer certificate's subject as RBAC's `principal_name` reads it (A41): the string
//! gRPC-Go matches, Go's `pkix.Name.String()`. That is RFC 2253: RDNs from the most
//! significant last, `,` between them with no space, `+` inside a multi-valued RDN,
//! `,+"\<>;` escaped with `\` (and a leading `#` or space, a trailing space). Like Go,
//! the known attributes come in its fixed order whatever the certificate's order (C,
//! ST, L, STREET, POSTALCODE, O, OU, CN, SERIALNUMBER, reversed), several values of one
//! attribute form one RDN, and other attributes follow as `OID=#hex` of their DER.

use x509_parser::x509::X509Name;

/// Go's known attribute types, in `ToRDNSequence` order.
const KNOWN: [(&str, &str); 9] = [
    ("2.5.4.6", "C"),
    ("2.5.4.8", "ST"),
    ("2.5.4.7", "L"),
    ("2.5.4.9", "STREET"),
    ("2.5.4.17", "POSTALCODE"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.3", "CN"),
    ("2.5.4.5", "SERIALNUMBER"),
];

/// `name` in gRPC-Go's form (see the module documentation).
pub(crate) fn rfc2253(name: &X509Name<'_>) -> String {
    let attributes: Vec<(String, String)> = name
        .iter_attributes()
        .map(|a| {
            let value = a
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|_| String::from_utf8_lossy(a.attr_value().data).into_owned());
            (a.attr_type().to_id_string(), value)
        })
        .collect();
    let mut rdns: Vec<String> = Vec::new();
    for (oid, short) in KNOWN {
        let values: Vec<String> = attributes
            .iter()
            .filter(|(o, _)| o == oid)
            .map(|(_, v)| format!("{short}={}", escape(v)))
            .collect();
        // Go keeps only the first CN and SERIALNUMBER.
        let keep = if matches!(short, "CN" | "SERIALNUMBER") {
            1
        } else {
            values.len()
        };
        if !values.is_empty() {
            rdns.push(values[..keep].join("+"));
        }
    }
    for (oid, value) in &attributes {
        if !KNOWN.iter().any(|(k, _)| k == oid) {
            rdns.push(format!("{oid}=#{}", hex(&der_string(value))));
        }
    }
    rdns.reverse();
    rdns.join(",")
}

fn escape(value: &str) -> String {
    let last = value.chars().count().saturating_sub(1);
    let mut out = String::with_capacity(value.len());
    for (i, c) in value.chars().enumerate() {
        let needs = match c {
            ',' | '+' | '"' | '\\' | '<' | '>' | ';' => true,
            ' ' => i == 0 || i == last,
            '#' => i == 0,
            _ => false,
        };
        if needs {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A string as Go's `asn1.Marshal` encodes it: PrintableString when it can be, else
/// UTF8String.
fn der_string(value: &str) -> Vec<u8> {
    let printable = value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b" '()+,-./:=?".contains(&b));
    let mut der = vec![if printable { 0x13 } else { 0x0c }];
    let len = value.len();
    if len < 0x80 {
        der.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        der.push(0x80 | bytes.len() as u8);
        der.extend(bytes);
    }
    der.extend_from_slice(value.as_bytes());
    der
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_as_go_does() {
        assert_eq!(escape("a,b+c"), "a\\,b\\+c");
        assert_eq!(escape(" #x# "), "\\ #x#\\ ");
        assert_eq!(escape("#a"), "\\#a");
        assert_eq!(escape("plain name"), "plain name");
    }

    #[test]
    fn unknown_attributes_are_go_der_strings() {
        assert_eq!(hex(&der_string("ab")), "13026162");
        assert_eq!(hex(&der_string("a@b")), "0c03614062");
    }
}
