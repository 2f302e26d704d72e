//! Validation rules shared by the operations: attribute names, types and values, message
//! bodies, batch entry ids, and the size of a message as SQS counts it.

use crate::ServiceError;
use base64::Engine as _;
use sluice_engine::MessageAttribute;
use std::collections::{BTreeMap, HashSet};

/// Most entries in one batch request.
pub const MAX_BATCH_ENTRIES: usize = 10;
const MAX_ATTRIBUTES: usize = 10;

/// Checks a batch's entry count and ids (1–80 of `[A-Za-z0-9_-]`, unique in the batch). A
/// failure fails the whole batch.
pub fn validate_batch_ids<'a>(
    ids: impl ExactSizeIterator<Item = &'a str>,
) -> Result<(), ServiceError> {
    let count = ids.len();
    if count == 0 || count > MAX_BATCH_ENTRIES {
        return Err(ServiceError::invalid(
            "entries",
            format!("must hold 1-{MAX_BATCH_ENTRIES} entries, got {count}"),
        ));
    }
    let mut seen = HashSet::new();
    for (index, id) in ids.enumerate() {
        let ok = !id.is_empty()
            && id.len() <= 80
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !ok {
            return Err(ServiceError::invalid(
                format!("entries[{index}].id"),
                "must be 1-80 characters of letters, digits, '_' and '-'",
            ));
        }
        if !seen.insert(id) {
            return Err(ServiceError::invalid(
                format!("entries[{index}].id"),
                format!("duplicate id {id:?} in this batch"),
            ));
        }
    }
    Ok(())
}

/// A body is non-empty and holds only the characters SQS allows (XML 1.0's: tab, newline,
/// carriage return, and everything from U+0020 except U+FFFE and U+FFFF).
pub fn validate_body(field: &str, body: &str) -> Result<(), ServiceError> {
    if body.is_empty() {
        return Err(ServiceError::invalid(field, "must not be empty"));
    }
    let allowed = |c: char| {
        matches!(c, '\t' | '\n' | '\r') || (c >= '\u{20}' && c != '\u{FFFE}' && c != '\u{FFFF}')
    };
    if let Some(position) = body.chars().position(|c| !allowed(c)) {
        return Err(ServiceError::invalid(
            field,
            format!("character {position} is not allowed in a message body (control characters other than tab, newline and carriage return)"),
        ));
    }
    Ok(())
}

/// Checks attribute count, names, types and values; answers their size as SQS counts it
/// (names, types and values, Binary values decoded).
pub fn validate_attributes(
    field: &str,
    attributes: &BTreeMap<String, MessageAttribute>,
) -> Result<usize, ServiceError> {
    if attributes.len() > MAX_ATTRIBUTES {
        return Err(ServiceError::invalid(
            field,
            format!(
                "at most {MAX_ATTRIBUTES} attributes, got {}",
                attributes.len()
            ),
        ));
    }
    let mut size = 0;
    for (name, attribute) in attributes {
        let here = format!("{field}.{name}");
        validate_attribute_name(&here, name)?;
        let base_type = attribute
            .data_type
            .split_once('.')
            .map_or(attribute.data_type.as_str(), |(base, _)| base);
        let custom = attribute
            .data_type
            .split_once('.')
            .map(|(_, custom)| custom);
        if !matches!(base_type, "String" | "Number" | "Binary") {
            return Err(ServiceError::invalid(
                format!("{here}.type"),
                "must be String, Number or Binary, optionally followed by '.' and a label",
            ));
        }
        if let Some(custom) = custom {
            let ok = !custom.is_empty()
                && attribute.data_type.len() <= 256
                && custom
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            if !ok {
                return Err(ServiceError::invalid(
                    format!("{here}.type"),
                    "the custom label after '.' must be 1+ characters of letters, digits, '_', '-' and '.'",
                ));
            }
        }
        if attribute.value.is_empty() {
            return Err(ServiceError::invalid(
                format!("{here}.value"),
                "must not be empty",
            ));
        }
        let value_size = match base_type {
            "Binary" => base64::engine::general_purpose::STANDARD
                .decode(&attribute.value)
                .map_err(|_| ServiceError::invalid(format!("{here}.value"), "must be base64"))?
                .len(),
            "Number" => {
                if !is_decimal_number(&attribute.value) {
                    return Err(ServiceError::invalid(
                        format!("{here}.value"),
                        "must be a decimal number (optional sign, digits, optional fraction and exponent)",
                    ));
                }
                attribute.value.len()
            }
            _ => {
                validate_body(&format!("{here}.value"), &attribute.value)?;
                attribute.value.len()
            }
        };
        size += name.len() + attribute.data_type.len() + value_size;
    }
    Ok(size)
}

fn validate_attribute_name(field: &str, name: &str) -> Result<(), ServiceError> {
    let lower = name.to_ascii_lowercase();
    let problem = if name.is_empty() || name.len() > 256 {
        Some("must be 1-256 characters")
    } else if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        Some("may hold only letters, digits, '_', '-' and '.'")
    } else if name.starts_with('.') || name.ends_with('.') || name.contains("..") {
        Some("may not start or end with '.' or contain '..'")
    } else if lower.starts_with("aws.") || lower.starts_with("amazon.") {
        Some("may not start with 'AWS.' or 'Amazon.'")
    } else {
        None
    };
    match problem {
        Some(message) => Err(ServiceError::invalid(
            field,
            format!("attribute name {message}"),
        )),
        None => Ok(()),
    }
}

/// Optional sign, digits with an optional fraction (or a fraction alone), optional exponent.
fn is_decimal_number(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    if matches!(bytes.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < bytes.len() && bytes[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    let whole = digits(&mut i);
    let mut fraction = 0;
    if i < bytes.len() && bytes[i] == b'.' {
        i += 1;
        fraction = digits(&mut i);
    }
    if whole + fraction == 0 {
        return false;
    }
    if i < bytes.len() && matches!(bytes[i], b'e' | b'E') {
        i += 1;
        if i < bytes.len() && matches!(bytes[i], b'+' | b'-') {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == bytes.len()
}

/// SQS's rule for group and deduplication ids: 1–128 of letters, digits and punctuation.
pub fn validate_token_id(field: &str, value: &str) -> Result<(), ServiceError> {
    if value.is_empty() || value.len() > 128 || !value.chars().all(|c| c.is_ascii_graphic()) {
        return Err(ServiceError::invalid(
            field,
            "must be 1-128 characters of letters, digits and punctuation",
        ));
    }
    Ok(())
}

/// Checks `value` lies in `min..=max`, naming `field` otherwise.
pub fn in_range(field: &str, value: u64, min: u64, max: u64) -> Result<(), ServiceError> {
    if value < min || value > max {
        return Err(ServiceError::invalid(
            field,
            format!("must be between {min} and {max}, got {value}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(pairs: &[(&str, &str, &str)]) -> BTreeMap<String, MessageAttribute> {
        pairs
            .iter()
            .map(|(name, data_type, value)| {
                (
                    name.to_string(),
                    MessageAttribute {
                        data_type: data_type.to_string(),
                        value: value.to_string(),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn numbers_are_decimal() {
        for ok in ["0", "-1", "+2.5", ".5", "5.", "1e10", "-1.5E-3"] {
            assert!(is_decimal_number(ok), "{ok}");
        }
        for bad in ["", "-", ".", "NaN", "inf", "1e", "1.2.3", "0x10", "1 "] {
            assert!(!is_decimal_number(bad), "{bad}");
        }
    }

    #[test]
    fn attribute_rules_name_the_field() {
        assert_eq!(
            validate_attributes(
                "attributes",
                &attrs(&[("a", "String", "xy"), ("n", "Number.int", "12")])
            ),
            Ok(1 + 6 + 2 + 1 + 10 + 2)
        );
        assert_eq!(
            validate_attributes("attributes", &attrs(&[("b", "Binary", "AQID")])),
            Ok(1 + 6 + 3)
        );
        for (bad, field) in [
            (attrs(&[("AWS.x", "String", "v")]), "attributes.AWS.x"),
            (attrs(&[("amazon.x", "String", "v")]), "attributes.amazon.x"),
            (attrs(&[("a..b", "String", "v")]), "attributes.a..b"),
            (attrs(&[(".a", "String", "v")]), "attributes..a"),
            (attrs(&[("a", "Text", "v")]), "attributes.a.type"),
            (attrs(&[("a", "String.", "v")]), "attributes.a.type"),
            (attrs(&[("a", "String", "")]), "attributes.a.value"),
            (attrs(&[("a", "Number", "NaN")]), "attributes.a.value"),
            (attrs(&[("a", "Binary", "***")]), "attributes.a.value"),
        ] {
            match validate_attributes("attributes", &bad) {
                Err(ServiceError::Validation { field: got, .. }) => assert_eq!(got, field),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        let eleven: Vec<(String, String, String)> = (0..11)
            .map(|i| (format!("a{i}"), "String".into(), "v".into()))
            .collect();
        let eleven: Vec<(&str, &str, &str)> = eleven
            .iter()
            .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()))
            .collect();
        assert!(validate_attributes("attributes", &attrs(&eleven)).is_err());
    }

    #[test]
    fn batch_ids_must_be_unique_and_well_formed() {
        assert!(validate_batch_ids(["a", "b-1"].into_iter()).is_ok());
        assert!(validate_batch_ids(std::iter::empty::<&str>()).is_err());
        assert!(validate_batch_ids(["a", "a"].into_iter()).is_err());
        assert!(validate_batch_ids(["a b"].into_iter()).is_err());
        let many: Vec<String> = (0..11).map(|i| i.to_string()).collect();
        assert!(validate_batch_ids(many.iter().map(String::as_str)).is_err());
    }

    #[test]
    fn bodies_refuse_control_characters() {
        assert!(validate_body("body", "tab\tnew\nline\r ok ✓").is_ok());
        assert!(validate_body("body", "").is_err());
        assert!(validate_body("body", "bell\u{7}").is_err());
        assert!(validate_body("body", "\u{FFFF}").is_err());
    }
}
