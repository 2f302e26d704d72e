//! `anything-but`: a value, a list, or `{"prefix"}`. Absent keys and `null` never match;
//! against an array it matches when any element is not excluded (the crate's documented
//! choice where AWS's documentation is ambiguous).

use super::support::{check_attributes, check_body};

const NOT_RUGBY_OR_TENNIS: &str =
    r#"{"customer_interests": [{"anything-but": ["rugby", "tennis"]}]}"#;

#[test]
fn anything_but_a_list_of_strings_on_attributes() {
    check_attributes(
        NOT_RUGBY_OR_TENNIS,
        &[
            (&[("customer_interests", "String", "baseball")], true),
            (&[("customer_interests", "String", "rugby")], false),
            (&[("customer_interests", "String", "tennis")], false),
            (&[("customer_interests", "String", "Rugby")], true),
            (&[("customer_interests", "String", "")], true),
            (&[], false),
            (&[("other", "String", "baseball")], false),
            (&[("customer_interests", "Binary", "baseball")], false),
        ],
    );
}

#[test]
fn anything_but_against_arrays_matches_if_any_element_is_not_excluded() {
    check_attributes(
        NOT_RUGBY_OR_TENNIS,
        &[
            (
                &[(
                    "customer_interests",
                    "String.Array",
                    r#"["rugby", "baseball"]"#,
                )],
                true,
            ),
            (
                &[(
                    "customer_interests",
                    "String.Array",
                    r#"["rugby", "tennis"]"#,
                )],
                false,
            ),
            (
                &[("customer_interests", "String.Array", r#"["rugby"]"#)],
                false,
            ),
            (&[("customer_interests", "String.Array", "[]")], false),
        ],
    );
    check_body(
        NOT_RUGBY_OR_TENNIS,
        &[
            (r#"{"customer_interests": ["rugby", "baseball"]}"#, true),
            (r#"{"customer_interests": ["rugby", "tennis"]}"#, false),
            (r#"{"customer_interests": ["rugby"]}"#, false),
            (r#"{"customer_interests": []}"#, false),
            (r#"{"customer_interests": [null]}"#, false),
            (r#"{"customer_interests": [null, "golf"]}"#, true),
        ],
    );
}

#[test]
fn anything_but_strings_on_bodies() {
    check_body(
        NOT_RUGBY_OR_TENNIS,
        &[
            (r#"{"customer_interests": "baseball"}"#, true),
            (r#"{"customer_interests": "rugby"}"#, false),
            (r#"{"customer_interests": null}"#, false),
            (r#"{"customer_interests": 5}"#, true),
            (r#"{"customer_interests": true}"#, true),
            (r#"{"customer_interests": {"a": "b"}}"#, false),
            (r#"{}"#, false),
        ],
    );
}

#[test]
fn anything_but_a_single_value() {
    check_body(
        r#"{"k": [{"anything-but": "rugby"}]}"#,
        &[
            (r#"{"k": "golf"}"#, true),
            (r#"{"k": "rugby"}"#, false),
            (r#"{"k": "rugby2"}"#, true),
        ],
    );
    check_body(
        r#"{"k": [{"anything-but": 100}]}"#,
        &[
            (r#"{"k": 100}"#, false),
            (r#"{"k": 100.0}"#, false),
            (r#"{"k": 1e2}"#, false),
            (r#"{"k": 100.1}"#, true),
            (r#"{"k": "100"}"#, true),
        ],
    );
    check_attributes(
        r#"{"k": [{"anything-but": "rugby"}]}"#,
        &[
            (&[("k", "String", "golf")], true),
            (&[("k", "String", "rugby")], false),
        ],
    );
}

#[test]
fn anything_but_numbers() {
    let policy = r#"{"price": [{"anything-but": [100, 500]}]}"#;
    check_attributes(
        policy,
        &[
            (&[("price", "Number", "101")], true),
            (&[("price", "Number", "100.1")], true),
            (&[("price", "Number", "100")], false),
            (&[("price", "Number", "500")], false),
            (&[("price", "Number", "5e2")], false),
            (&[("price", "Number", "100.000001")], false),
            (&[("price", "Number", "not a number")], false),
            (&[("price", "String.Array", "[100, 101]")], true),
            (&[("price", "String.Array", "[100, 500]")], false),
            (&[], false),
        ],
    );
    check_body(
        policy,
        &[
            (r#"{"price": 101}"#, true),
            (r#"{"price": 100.1}"#, true),
            (r#"{"price": 100}"#, false),
            (r#"{"price": 500.0}"#, false),
            (r#"{"price": [100, 500]}"#, false),
            (r#"{"price": [100, 7]}"#, true),
        ],
    );
}

#[test]
fn anything_but_a_mixed_list() {
    check_body(
        r#"{"k": [{"anything-but": ["a", 1]}]}"#,
        &[
            (r#"{"k": "a"}"#, false),
            (r#"{"k": 1}"#, false),
            (r#"{"k": "1"}"#, true),
            (r#"{"k": "b"}"#, true),
            (r#"{"k": 2}"#, true),
        ],
    );
}

#[test]
fn anything_but_prefix() {
    let policy = r#"{"event": [{"anything-but": {"prefix": "order-"}}]}"#;
    check_attributes(
        policy,
        &[
            (&[("event", "String", "order-placed")], false),
            (&[("event", "String", "order-")], false),
            (&[("event", "String", "order")], true),
            (&[("event", "String", "invoice-sent")], true),
            (&[("event", "String", "Order-placed")], true),
            (
                &[("event", "String.Array", r#"["order-1", "invoice-1"]"#)],
                true,
            ),
            (
                &[("event", "String.Array", r#"["order-1", "order-2"]"#)],
                false,
            ),
            (&[], false),
        ],
    );
    check_body(
        policy,
        &[
            (r#"{"event": "order-placed"}"#, false),
            (r#"{"event": "invoice-sent"}"#, true),
            (r#"{"event": 5}"#, true),
            (r#"{"event": null}"#, false),
            (r#"{}"#, false),
        ],
    );
}

#[test]
fn anything_but_combined_with_other_conditions_is_an_or() {
    check_body(
        r#"{"k": [{"anything-but": "a"}, "a"]}"#,
        &[
            (r#"{"k": "a"}"#, true),
            (r#"{"k": "b"}"#, true),
            (r#"{}"#, false),
        ],
    );
}
