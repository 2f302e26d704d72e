//! Exact values: strings (case-sensitive), numbers (compared as numbers), `null`, booleans.

use super::support::{check_attributes, check_body};

const INTERESTS: &str = r#"{"customer_interests": ["rugby", "tennis"]}"#;

#[test]
fn exact_strings_on_attributes() {
    check_attributes(
        INTERESTS,
        &[
            (&[("customer_interests", "String", "rugby")], true),
            (&[("customer_interests", "String", "tennis")], true),
            (&[("customer_interests", "String", "baseball")], false),
            (&[("customer_interests", "String", "Rugby")], false),
            (&[("customer_interests", "String", "rugby ")], false),
            (&[("customer_interests", "String", "")], false),
            (
                &[(
                    "customer_interests",
                    "String.Array",
                    r#"["rugby", "tennis"]"#,
                )],
                true,
            ),
            (
                &[(
                    "customer_interests",
                    "String.Array",
                    r#"["baseball", "rugby"]"#,
                )],
                true,
            ),
            (
                &[("customer_interests", "String.Array", r#"["baseball"]"#)],
                false,
            ),
            (&[("customer_interests", "String.Array", "[]")], false),
            (&[("customer_interests", "String.Array", "not json")], false),
            (
                &[("customer_interests", "String.Array", r#""rugby""#)],
                false,
            ),
            (
                &[("customer_interests", "String.Array", r#"[["rugby"]]"#)],
                false,
            ),
            (&[("customer_interests", "Binary", "rugby")], false),
            (&[("other", "String", "rugby")], false),
            (&[], false),
            (
                &[
                    ("customer_interests", "String", "rugby"),
                    ("other", "String", "x"),
                ],
                true,
            ),
        ],
    );
}

#[test]
fn exact_strings_on_bodies() {
    check_body(
        INTERESTS,
        &[
            (r#"{"customer_interests": "rugby"}"#, true),
            (r#"{"customer_interests": "tennis"}"#, true),
            (r#"{"customer_interests": "baseball"}"#, false),
            (r#"{"customer_interests": "RUGBY"}"#, false),
            (r#"{"customer_interests": ["baseball", "rugby"]}"#, true),
            (r#"{"customer_interests": ["baseball"]}"#, false),
            (r#"{"customer_interests": []}"#, false),
            (r#"{"customer_interests": {"rugby": "rugby"}}"#, false),
            (r#"{"customer_interests": null}"#, false),
            (r#"{"customer_interests": 5}"#, false),
            (r#"{"other": "rugby"}"#, false),
            (r#"{}"#, false),
            (
                r#"{"customer_interests": "rugby", "extra": [1, 2, {"a": null}]}"#,
                true,
            ),
        ],
    );
}

#[test]
fn several_keys_must_all_match() {
    let policy = r#"{"store": ["example_corp"], "event": ["order_placed", "order_cancelled"]}"#;
    check_attributes(
        policy,
        &[
            (
                &[
                    ("store", "String", "example_corp"),
                    ("event", "String", "order_placed"),
                ],
                true,
            ),
            (
                &[
                    ("store", "String", "example_corp"),
                    ("event", "String", "order_cancelled"),
                ],
                true,
            ),
            (
                &[
                    ("store", "String", "example_corp"),
                    ("event", "String", "order_shipped"),
                ],
                false,
            ),
            (
                &[
                    ("store", "String", "other_corp"),
                    ("event", "String", "order_placed"),
                ],
                false,
            ),
            (&[("store", "String", "example_corp")], false),
            (&[("event", "String", "order_placed")], false),
        ],
    );
    check_body(
        policy,
        &[
            (
                r#"{"store": "example_corp", "event": "order_placed"}"#,
                true,
            ),
            (
                r#"{"store": "example_corp", "event": "order_shipped"}"#,
                false,
            ),
            (r#"{"store": "example_corp"}"#, false),
            (r#"{"event": "order_cancelled"}"#, false),
        ],
    );
}

#[test]
fn exact_numbers_on_attributes() {
    check_attributes(
        r#"{"price": [100]}"#,
        &[
            (&[("price", "Number", "100")], true),
            (&[("price", "Number", "100.0")], true),
            (&[("price", "Number", "1e2")], true),
            (&[("price", "Number", "1.0E2")], true),
            (&[("price", "Number", "100.000001")], true),
            (&[("price", "Number", "100.00001")], false),
            (&[("price", "Number", "99.99999")], false),
            (&[("price", "Number", "101")], false),
            (&[("price", "Number", "-100")], false),
            (&[("price", "Number", "abc")], false),
            (&[("price", "Number", "")], false),
            (&[("price", "String", "100")], false),
            (&[("price", "String.Array", "[100]")], true),
            (&[("price", "String.Array", "[1, 2, 100.0]")], true),
            (&[("price", "String.Array", r#"["100"]"#)], false),
        ],
    );
    check_attributes(
        r#"{"price_usd": [301.5]}"#,
        &[
            (&[("price_usd", "Number", "301.5")], true),
            (&[("price_usd", "Number", "3.015e2")], true),
            (&[("price_usd", "Number", "301.50")], true),
            (&[("price_usd", "Number", "301.4")], false),
        ],
    );
    check_attributes(
        r#"{"delta": [-5, 0]}"#,
        &[
            (&[("delta", "Number", "-5")], true),
            (&[("delta", "Number", "-5.0")], true),
            (&[("delta", "Number", "0")], true),
            (&[("delta", "Number", "-0")], true),
            (&[("delta", "Number", "0.000001")], true),
            (&[("delta", "Number", "5")], false),
        ],
    );
}

#[test]
fn exact_numbers_on_bodies() {
    check_body(
        r#"{"price": [100]}"#,
        &[
            (r#"{"price": 100}"#, true),
            (r#"{"price": 100.0}"#, true),
            (r#"{"price": 1e2}"#, true),
            (r#"{"price": 100.00001}"#, false),
            (r#"{"price": 101}"#, false),
            (r#"{"price": "100"}"#, false),
            (r#"{"price": [1, 100]}"#, true),
            (r#"{"price": [1, 2]}"#, false),
            (r#"{"price": true}"#, false),
            (r#"{"price": 18446744073709551615}"#, false),
        ],
    );
    check_body(
        r#"{"huge": [1e300]}"#,
        &[
            (r#"{"huge": 1e300}"#, true),
            (r#"{"huge": 1e299}"#, false),
            (r#"{"huge": 1.7e308}"#, false),
            (r#"{"huge": 1e305}"#, false),
        ],
    );
    check_body(
        r#"{"big": [123456789]}"#,
        &[
            (r#"{"big": 123456789}"#, true),
            (r#"{"big": 123456789.000001}"#, true),
            (r#"{"big": 123456790}"#, false),
        ],
    );
}

#[test]
fn null_matches_only_null() {
    check_body(
        r#"{"k": [null]}"#,
        &[
            (r#"{"k": null}"#, true),
            (r#"{"k": [1, null]}"#, true),
            (r#"{"k": "null"}"#, false),
            (r#"{"k": 0}"#, false),
            (r#"{"k": false}"#, false),
            (r#"{"k": []}"#, false),
            (r#"{}"#, false),
        ],
    );
    check_attributes(
        r#"{"k": [null]}"#,
        &[
            (&[("k", "String.Array", "[null]")], true),
            (&[("k", "String", "null")], false),
            (&[], false),
        ],
    );
}

#[test]
fn booleans_match_only_booleans() {
    check_body(
        r#"{"k": [true]}"#,
        &[
            (r#"{"k": true}"#, true),
            (r#"{"k": false}"#, false),
            (r#"{"k": "true"}"#, false),
            (r#"{"k": 1}"#, false),
            (r#"{"k": [false, true]}"#, true),
        ],
    );
    check_body(
        r#"{"k": [false]}"#,
        &[
            (r#"{"k": false}"#, true),
            (r#"{"k": true}"#, false),
            (r#"{"k": null}"#, false),
        ],
    );
    check_attributes(
        r#"{"k": [true]}"#,
        &[
            (&[("k", "String.Array", "[true]")], true),
            (&[("k", "String", "true")], false),
        ],
    );
}

#[test]
fn a_list_mixing_types_matches_each_type() {
    let policy = r#"{"k": ["a", 1, null, true]}"#;
    check_body(
        policy,
        &[
            (r#"{"k": "a"}"#, true),
            (r#"{"k": 1}"#, true),
            (r#"{"k": null}"#, true),
            (r#"{"k": true}"#, true),
            (r#"{"k": "1"}"#, false),
            (r#"{"k": false}"#, false),
            (r#"{"k": "b"}"#, false),
        ],
    );
    check_attributes(
        policy,
        &[
            (&[("k", "String", "a")], true),
            (&[("k", "Number", "1")], true),
            (&[("k", "String", "1")], false),
            (&[("k", "String.Array", r#"["b", null]"#)], true),
        ],
    );
}

#[test]
fn unicode_and_escapes_compare_exactly() {
    let policy = r#"{"k": ["école", "a\"b", "tab\there", "😀"]}"#;
    check_body(
        policy,
        &[
            (r#"{"k": "école"}"#, true),
            (r#"{"k": "\u00e9cole"}"#, true),
            (r#"{"k": "ecole"}"#, false),
            (r#"{"k": "a\"b"}"#, true),
            (r#"{"k": "tab\there"}"#, true),
            (r#"{"k": "😀"}"#, true),
        ],
    );
    check_attributes(
        policy,
        &[
            (&[("k", "String", "école")], true),
            (&[("k", "String", "a\"b")], true),
            (&[("k", "String", "😀")], true),
            (&[("k", "String", "😁")], false),
        ],
    );
}
