//! Validation rules shared by the operations: attribute names, types and values, message
//! bodies, batch entry ids, and the size of a message as SQS counts it.

use crate::ServiceError;
use base64::Engine as _;
use sluice_engine::MessageAttribute;
use std::collections::{BTreeMap, HashSet};

/// Most entries in one batch request.
pub const MAX_BATCH_ENTRIES: usize = 10;
const MAX_ATTRIBUTES: usize = 10;

/// Whether `id` may name a batch entry: 1–80 of `[A-Za-z0-9_-]` (SQS's rule).
pub fn is_valid_batch_entry_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 80
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

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
        if !is_valid_batch_entry_id(id) {
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
pub(crate) fn validate_body(field: &str, body: &str) -> Result<(), ServiceError> {
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

/// Checks attribute count, names, types and values (their size, with the body's, is
/// [`sluice_engine::message_size`]).
pub(crate) fn validate_attributes(
    field: &str,
    attributes: &BTreeMap<String, MessageAttribute>,
) -> Result<(), ServiceError> {
    if attributes.len() > MAX_ATTRIBUTES {
        return Err(ServiceError::invalid(
            field,
            format!(
                "at most {MAX_ATTRIBUTES} attributes, got {}",
                attributes.len()
            ),
        ));
    }
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
        match base_type {
            "Binary" => {
                base64::engine::general_purpose::STANDARD
                    .decode(&attribute.value)
                    .map_err(|_| {
                        ServiceError::invalid(format!("{here}.value"), "must be base64")
                    })?;
            }
            "Number" => validate_number(&format!("{here}.value"), &attribute.value)?,
            _ => validate_body(&format!("{here}.value"), &attribute.value)?,
        }
    }
    Ok(())
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

/// Most significant digits of a `Number` attribute (SQS's rule).
const MAX_NUMBER_DIGITS: usize = 38;
/// The smallest and largest magnitudes of a non-zero `Number`, as powers of ten (SQS's rule).
const MIN_NUMBER_EXPONENT: i64 = -128;
const MAX_NUMBER_EXPONENT: i64 = 126;

/// SQS's rule for `Number` values: a decimal number with up to 38 digits of precision whose
/// magnitude, unless zero, lies between 10^-128 and 10^126. Digits of precision are counted as
/// written, like Java's `BigDecimal::precision`: leading zeros do not count, trailing zeros do
/// (`1.50` has three), since they state a precision; `1e38` is the way to write a large round
/// number.
fn validate_number(field: &str, text: &str) -> Result<(), ServiceError> {
    let Some(number) = DecimalNumber::parse(text) else {
        return Err(ServiceError::invalid(
            field,
            "must be a decimal number (optional sign, digits, optional fraction and exponent)",
        ));
    };
    if number.significant_digits > MAX_NUMBER_DIGITS {
        return Err(ServiceError::invalid(
            field,
            format!(
                "a Number has at most {MAX_NUMBER_DIGITS} significant digits, this one has {}",
                number.significant_digits
            ),
        ));
    }
    if let Some(magnitude) = number.magnitude {
        let too_large = magnitude > MAX_NUMBER_EXPONENT
            || (magnitude == MAX_NUMBER_EXPONENT && !number.is_power_of_ten);
        if magnitude < MIN_NUMBER_EXPONENT || too_large {
            return Err(ServiceError::invalid(
                field,
                format!("a Number lies between 10^{MIN_NUMBER_EXPONENT} and 10^{MAX_NUMBER_EXPONENT} in magnitude (or is zero)"),
            ));
        }
    }
    Ok(())
}

/// What the Number rule needs to know of a decimal number.
#[derive(Debug, PartialEq, Eq)]
struct DecimalNumber {
    /// Digits from the first non-zero one to the last one written (1 for zero).
    significant_digits: usize,
    /// `floor(log10(|x|))`, the power of ten of the first significant digit; `None` for zero.
    magnitude: Option<i64>,
    /// Whether `|x|` is exactly a power of ten (a 1 followed only by zeros).
    is_power_of_ten: bool,
}

impl DecimalNumber {
    /// Optional sign, digits with an optional fraction (or a fraction alone), optional
    /// exponent; `None` for anything else.
    fn parse(text: &str) -> Option<DecimalNumber> {
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
            &bytes[start..*i]
        };
        let whole = digits(&mut i);
        let mut fraction: &[u8] = &[];
        if i < bytes.len() && bytes[i] == b'.' {
            i += 1;
            fraction = digits(&mut i);
        }
        if whole.is_empty() && fraction.is_empty() {
            return None;
        }
        let mut exponent: i64 = 0;
        if i < bytes.len() && matches!(bytes[i], b'e' | b'E') {
            i += 1;
            let negative = match bytes.get(i) {
                Some(b'-') => {
                    i += 1;
                    true
                }
                Some(b'+') => {
                    i += 1;
                    false
                }
                _ => false,
            };
            let written = digits(&mut i);
            if written.is_empty() {
                return None;
            }
            // Saturating: any exponent this large is out of range whatever the digits say,
            // and a long run of exponent digits must not overflow.
            for digit in written {
                exponent = (exponent * 10 + i64::from(digit - b'0')).min(1 << 40);
            }
            if negative {
                exponent = -exponent;
            }
        }
        if i != bytes.len() {
            return None;
        }
        // The digits as one run; the decimal point sits after `whole.len()` of them.
        let all = || whole.iter().chain(fraction);
        let Some(first) = all().position(|&d| d != b'0') else {
            return Some(DecimalNumber {
                significant_digits: 1,
                magnitude: None,
                is_power_of_ten: false,
            });
        };
        let total = whole.len() + fraction.len();
        let point = whole.len() as i64;
        Some(DecimalNumber {
            significant_digits: total - first,
            magnitude: Some(point - 1 - first as i64 + exponent),
            is_power_of_ten: all().nth(first) == Some(&b'1')
                && all().skip(first + 1).all(|&d| d == b'0'),
        })
    }
}

/// SQS's rule for group and deduplication ids: 1–128 of letters, digits and punctuation.
/// A FIFO message's deduplication id: the one given, or under content-based deduplication the
/// SHA-256 of the body; `owner` (`queue` or `topic`) names what lacks it in the error.
pub(crate) fn fifo_deduplication_id(
    field: &str,
    given: Option<&str>,
    content_based: bool,
    body: &str,
    owner: &str,
) -> Result<String, ServiceError> {
    use sha2::Digest;
    match given {
        Some(id) => Ok(id.to_owned()),
        None if content_based => Ok(hex::encode(sha2::Sha256::digest(body.as_bytes()))),
        None => Err(ServiceError::invalid(
            field,
            format!("is required unless the {owner} has content_based_deduplication"),
        )),
    }
}

pub(crate) fn validate_token_id(field: &str, value: &str) -> Result<(), ServiceError> {
    if value.is_empty() || value.len() > 128 || !value.chars().all(|c| c.is_ascii_graphic()) {
        return Err(ServiceError::invalid(
            field,
            "must be 1-128 characters of letters, digits and punctuation",
        ));
    }
    Ok(())
}

/// Checks `value` lies in `min..=max`, naming `field` otherwise.
pub(crate) fn in_range(field: &str, value: u64, min: u64, max: u64) -> Result<(), ServiceError> {
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
            assert!(DecimalNumber::parse(ok).is_some(), "{ok}");
        }
        for bad in [
            "", "-", ".", "NaN", "inf", "1e", "1.2.3", "0x10", "1 ", "1e+", "--1",
        ] {
            assert!(DecimalNumber::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn numbers_count_significant_digits_and_magnitude() {
        let parsed = |text: &str| DecimalNumber::parse(text).unwrap();
        assert_eq!(parsed("000123.4500").significant_digits, 7);
        assert_eq!(parsed("000123.4500").magnitude, Some(2));
        assert_eq!(parsed("0.00012").magnitude, Some(-4));
        assert_eq!(parsed("0.00012").significant_digits, 2);
        assert_eq!(parsed("12e-3").magnitude, Some(-2));
        assert_eq!(parsed("-0.000").magnitude, None);
        assert_eq!(parsed("-0.000").significant_digits, 1);
        assert!(parsed("1000").is_power_of_ten);
        assert!(!parsed("1001").is_power_of_ten);
        assert!(parsed("0.01e128").is_power_of_ten);
    }

    #[test]
    fn numbers_follow_sqs_precision_and_range() {
        let field = |text: &str| match validate_number("n", text) {
            Ok(()) => None,
            Err(ServiceError::Validation { field, message }) => Some(format!("{field}: {message}")),
            Err(other) => panic!("{other:?}"),
        };
        let digits = |n: usize| "7".repeat(n);
        for ok in [
            digits(38),
            format!("-{}", digits(38)),
            format!("0.{}", digits(38)),
            format!("000000{}", digits(38)),
            "1e126".into(),
            "-1e126".into(),
            "10e125".into(),
            "1e-128".into(),
            "0.1e-127".into(),
            "9.99e125".into(),
            "0".into(),
            format!("0.{}e-999999999999", "0".repeat(100)),
            "1e0000000000000000000000000000000000000000000000000000000000126".into(),
        ] {
            assert_eq!(field(&ok), None, "{ok}");
        }
        for bad in [
            digits(39),
            format!("{}.7", digits(38)),
            format!("0.{}", digits(39)),
            format!("1{}", "0".repeat(38)),
            "7".repeat(100_000),
            "1.01e126".into(),
            "2e126".into(),
            "1e127".into(),
            "9.9e-129".into(),
            "1e-129".into(),
            format!("1e{}", "9".repeat(100)),
            format!("1e-{}", "9".repeat(100)),
        ] {
            let message =
                field(&bad).unwrap_or_else(|| panic!("{} accepted", &bad[..bad.len().min(60)]));
            assert!(message.starts_with("n: a Number"), "{message}");
        }
    }

    #[test]
    fn attribute_rules_name_the_field() {
        // Valid ones, and their size as max_message_bytes counts it (Binary decoded).
        let both = attrs(&[("a", "String", "xy"), ("n", "Number.int", "12")]);
        assert_eq!(validate_attributes("attributes", &both), Ok(()));
        assert_eq!(
            sluice_engine::message_size("", &both),
            1 + 6 + 2 + 1 + 10 + 2
        );
        let binary = attrs(&[("b", "Binary", "AQID")]);
        assert_eq!(validate_attributes("attributes", &binary), Ok(()));
        assert_eq!(sluice_engine::message_size("", &binary), 1 + 6 + 3);
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
