//! MD5 digests computed exactly as Amazon SQS computes them, so SQS clients can verify bodies
//! and attributes they receive from Sluice.

use base64::Engine as _;
use md5::{Digest, Md5};
use sluice_engine::MessageAttribute;
use std::collections::BTreeMap;

/// Lowercase hex MD5 of the body's UTF-8 bytes.
pub fn md5_of_body(body: &str) -> String {
    hex::encode(Md5::digest(body.as_bytes()))
}

/// SQS's attribute digest: for each attribute in name order, the name, the data type and the
/// value, each prefixed by its 4-byte big-endian length, with a transport byte (1 for string
/// and number values, 2 for binary) before the value. `None` when there are no attributes.
pub fn md5_of_attributes(attributes: &BTreeMap<String, MessageAttribute>) -> Option<String> {
    if attributes.is_empty() {
        return None;
    }
    fn put(hasher: &mut Md5, bytes: &[u8]) {
        hasher.update((bytes.len() as u32).to_be_bytes());
        hasher.update(bytes);
    }
    let mut hasher = Md5::new();
    for (name, attribute) in attributes {
        put(&mut hasher, name.as_bytes());
        put(&mut hasher, attribute.data_type.as_bytes());
        if attribute.data_type.starts_with("Binary") {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(&attribute.value)
                .unwrap_or_default();
            hasher.update([2u8]);
            put(&mut hasher, &decoded);
        } else {
            hasher.update([1u8]);
            put(&mut hasher, attribute.value.as_bytes());
        }
    }
    Some(hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(data_type: &str, value: &str) -> MessageAttribute {
        MessageAttribute {
            data_type: data_type.into(),
            value: value.into(),
        }
    }

    #[test]
    fn body_digest_matches_md5_of_bytes() {
        assert_eq!(md5_of_body("hello"), "5d41402abc4b2a76b9719d911017c592");
    }

    #[test]
    fn attribute_digest_matches_published_sqs_values() {
        // Digests that SQS clients verify against, as published by SQS emulators' test suites.
        type Attributes<'a> = &'a [(&'a str, &'a str, &'a str)];
        let cases: [(Attributes, &str); 3] = [
            (
                &[("SellerName", "String", "Example Store")],
                "cd28f3b68aeee4b2eac9c66f2f694b58",
            ),
            (
                &[("timestamp", "Number", "1493147359900")],
                "235c5c510d26fb653d073faed50ae77c",
            ),
            (
                &[("ordinal", "Number", "1"), ("category", "String", "test")],
                "d21ae90c49061e927f57df5f5d72be1f",
            ),
        ];
        for (attributes, expected) in cases {
            let map = attributes
                .iter()
                .map(|(name, data_type, value)| (name.to_string(), attr(data_type, value)))
                .collect();
            assert_eq!(
                md5_of_attributes(&map).as_deref(),
                Some(expected),
                "{attributes:?}"
            );
        }
    }

    #[test]
    fn attribute_digest_matches_the_sqs_algorithm() {
        // Reference values from botocore's SQS checksum customisation (the same algorithm).
        let mut attributes = BTreeMap::new();
        attributes.insert("foo".to_string(), attr("String", "bar"));
        assert_eq!(
            md5_of_attributes(&attributes).as_deref(),
            Some(reference_digest(&[("foo", "String", 1, b"bar")]).as_str())
        );
        attributes.insert("bin".to_string(), attr("Binary", "AQID"));
        assert_eq!(
            md5_of_attributes(&attributes).as_deref(),
            Some(
                reference_digest(&[
                    ("bin", "Binary", 2, &[1, 2, 3]),
                    ("foo", "String", 1, b"bar")
                ])
                .as_str()
            )
        );
        assert_eq!(md5_of_attributes(&BTreeMap::new()), None);
    }

    /// An independent spelling of the byte layout, written from the SQS documentation.
    fn reference_digest(entries: &[(&str, &str, u8, &[u8])]) -> String {
        let mut bytes = Vec::new();
        for (name, kind, transport, value) in entries {
            bytes.extend((name.len() as u32).to_be_bytes());
            bytes.extend(name.as_bytes());
            bytes.extend((kind.len() as u32).to_be_bytes());
            bytes.extend(kind.as_bytes());
            bytes.push(*transport);
            bytes.extend((value.len() as u32).to_be_bytes());
            bytes.extend(*value);
        }
        hex::encode(Md5::digest(&bytes))
    }
}
