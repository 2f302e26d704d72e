//! `explain_*`: which key failed and why, one entry per `$or` alternative.

use sluice_filter::{FilterPolicy, FilterScope, KeyMismatch, KeyMismatchReason, Mismatch};

use super::support::attributes;

fn key(key: &str, reason: KeyMismatchReason) -> KeyMismatch {
    KeyMismatch {
        key: key.to_owned(),
        reason,
    }
}

#[test]
fn body_mismatches_name_the_key_and_reason() {
    let policy = FilterPolicy::parse(
        r#"{"store": ["example_corp"], "detail": {"gone": [{"exists": false}]}}"#,
        FilterScope::Body,
    )
    .unwrap();
    assert_eq!(policy.explain_body("nope"), Err(Mismatch::BodyNotJson));
    assert_eq!(policy.explain_body("[1]"), Err(Mismatch::BodyNotObject));
    assert_eq!(
        policy.explain_body(r#"{"detail": {}}"#),
        Err(Mismatch::Keys(vec![key(
            "store",
            KeyMismatchReason::Missing
        )]))
    );
    assert_eq!(
        policy.explain_body(r#"{"store": "other"}"#),
        Err(Mismatch::Keys(vec![key(
            "store",
            KeyMismatchReason::NoConditionMatched
        )]))
    );
    assert_eq!(
        policy.explain_body(r#"{"store": "example_corp", "detail": {"gone": 1}}"#),
        Err(Mismatch::Keys(vec![key(
            "detail.gone",
            KeyMismatchReason::MustNotExist
        )]))
    );
    assert_eq!(policy.explain_body(r#"{"store": "example_corp"}"#), Ok(()));
}

#[test]
fn attribute_mismatches_report_every_alternative() {
    let policy = FilterPolicy::parse(
        r#"{"source": ["a"], "$or": [{"x": ["1"]}, {"y": [{"numeric": [">", 5]}]}]}"#,
        FilterScope::Attributes,
    )
    .unwrap();
    let message = attributes(&[("source", "String", "a"), ("y", "Number", "3")]);
    let mismatch = policy.explain_attributes(&message).unwrap_err();
    assert_eq!(
        mismatch,
        Mismatch::Keys(vec![
            key("x", KeyMismatchReason::Missing),
            key("y", KeyMismatchReason::NoConditionMatched),
        ])
    );
    assert_eq!(
        mismatch.to_string(),
        r#"key "x" is missing; or key "y" matches none of its conditions"#
    );
    let binary = attributes(&[("source", "Binary", "a"), ("x", "String", "1")]);
    assert_eq!(
        policy.explain_attributes(&binary),
        Err(Mismatch::Keys(vec![
            key("source", KeyMismatchReason::Missing),
            key("y", KeyMismatchReason::Missing),
        ]))
    );
    let passing = attributes(&[("source", "String", "a"), ("y", "Number", "6")]);
    assert_eq!(policy.explain_attributes(&passing), Ok(()));
}

#[test]
fn mismatch_messages_read_well() {
    assert_eq!(
        Mismatch::BodyNotJson.to_string(),
        "the message body is not JSON"
    );
    assert_eq!(
        Mismatch::BodyNotObject.to_string(),
        "the message body is not a JSON object"
    );
    assert_eq!(
        key("a.b", KeyMismatchReason::MustNotExist).to_string(),
        r#"key "a.b" is present but must not exist"#
    );
}

#[test]
fn hash_maps_work_as_attributes_too() {
    let policy = FilterPolicy::parse(r#"{"k": ["v"]}"#, FilterScope::Attributes).unwrap();
    let mut message = std::collections::HashMap::new();
    message.insert(
        "k".to_owned(),
        sluice_filter::AttributeValue::new("String", "v"),
    );
    assert!(policy.matches_attributes(&message));
    message.insert(
        "k".to_owned(),
        sluice_filter::AttributeValue::new("String", "w"),
    );
    assert!(!policy.matches_attributes(&message));
}
