//! `exists`: judged on presence only. `null` and `false` are present; empty arrays, objects
//! where a leaf is expected, and binary attributes are absent.

use super::support::{check_attributes, check_body};

#[test]
fn exists_true_on_attributes() {
    check_attributes(
        r#"{"store": [{"exists": true}]}"#,
        &[
            (&[("store", "String", "example_corp")], true),
            (&[("store", "String", "")], true),
            (&[("store", "Number", "1")], true),
            (&[("store", "Number", "not a number")], true),
            (&[("store", "String.Array", "[]")], true),
            (&[("store", "String.Array", r#"["a"]"#)], true),
            (&[("store", "Binary", "AAEC")], false),
            (&[("store", "Nonsense", "x")], false),
            (&[("other", "String", "x")], false),
            (&[], false),
        ],
    );
}

#[test]
fn exists_false_on_attributes() {
    check_attributes(
        r#"{"store": [{"exists": false}]}"#,
        &[
            (&[], true),
            (&[("other", "String", "x")], true),
            (&[("store", "Binary", "AAEC")], true),
            (&[("store", "String", "example_corp")], false),
            (&[("store", "Number", "0")], false),
            (&[("store", "String.Array", "[]")], false),
        ],
    );
}

#[test]
fn exists_true_on_bodies() {
    check_body(
        r#"{"k": [{"exists": true}]}"#,
        &[
            (r#"{"k": "x"}"#, true),
            (r#"{"k": ""}"#, true),
            (r#"{"k": 0}"#, true),
            (r#"{"k": false}"#, true),
            (r#"{"k": null}"#, true),
            (r#"{"k": [1]}"#, true),
            (r#"{"k": [null]}"#, true),
            (r#"{"k": []}"#, false),
            (r#"{"k": [[]]}"#, false),
            (r#"{"k": {}}"#, false),
            (r#"{"k": {"a": 1}}"#, false),
            (r#"{"other": 1}"#, false),
            (r#"{}"#, false),
        ],
    );
}

#[test]
fn exists_false_on_bodies() {
    check_body(
        r#"{"k": [{"exists": false}]}"#,
        &[
            (r#"{}"#, true),
            (r#"{"other": 1}"#, true),
            (r#"{"k": []}"#, true),
            (r#"{"k": {"a": 1}}"#, true),
            (r#"{"k": null}"#, false),
            (r#"{"k": "x"}"#, false),
            (r#"{"k": [1]}"#, false),
            ("[]", false),
            ("not json", false),
        ],
    );
}

#[test]
fn exists_in_nested_bodies() {
    check_body(
        r#"{"a": {"b": [{"exists": false}]}}"#,
        &[
            (r#"{}"#, true),
            (r#"{"a": {}}"#, true),
            (r#"{"a": "scalar"}"#, true),
            (r#"{"a": {"c": 1}}"#, true),
            (r#"{"a": {"b": 1}}"#, false),
            (r#"{"a": [{"c": 1}, {"b": 2}]}"#, false),
        ],
    );
    check_body(
        r#"{"a": {"b": [{"exists": true}]}}"#,
        &[
            (r#"{"a": {"b": null}}"#, true),
            (r#"{"a": [{"c": 1}, {"b": 2}]}"#, true),
            (r#"{"a.b": 3}"#, true),
            (r#"{"a": {"c": 1}}"#, false),
            (r#"{"b": 1}"#, false),
        ],
    );
}

#[test]
fn exists_combined_with_values() {
    let policy = r#"{"k": [{"exists": false}, "x"]}"#;
    check_attributes(
        policy,
        &[
            (&[], true),
            (&[("k", "String", "x")], true),
            (&[("k", "String", "y")], false),
        ],
    );
    check_body(
        policy,
        &[
            (r#"{}"#, true),
            (r#"{"k": "x"}"#, true),
            (r#"{"k": "y"}"#, false),
        ],
    );
    check_attributes(
        r#"{"store": [{"exists": true}], "customer_interests": [{"exists": false}]}"#,
        &[
            (&[("store", "String", "a")], true),
            (
                &[
                    ("store", "String", "a"),
                    ("customer_interests", "String", "b"),
                ],
                false,
            ),
            (&[("customer_interests", "String", "b")], false),
            (&[], false),
        ],
    );
}

#[test]
fn a_missing_key_fails_every_other_condition() {
    for condition in [
        r#""x""#,
        "1",
        "null",
        "true",
        r#"{"prefix": ""}"#,
        r#"{"suffix": ""}"#,
        r#"{"equals-ignore-case": "x"}"#,
        r#"{"anything-but": "x"}"#,
        r#"{"anything-but": {"prefix": "x"}}"#,
        r#"{"numeric": [">", 0]}"#,
        r#"{"cidr": "0.0.0.0/0"}"#,
        r#"{"exists": true}"#,
    ] {
        let policy = format!(r#"{{"k": [{condition}]}}"#);
        check_body(&policy, &[(r#"{"other": "x"}"#, false), (r#"{}"#, false)]);
        check_attributes(
            &policy,
            &[(&[("other", "String", "x")], false), (&[], false)],
        );
    }
}
