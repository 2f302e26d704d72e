//! `numeric`: `=`, `<`, `<=`, `>`, `>=` and two-sided ranges; numbers only, compared as
//! numbers to five decimal places.

use super::support::{check_attributes, check_body};

#[test]
fn numeric_equals() {
    let policy = r#"{"price_usd": [{"numeric": ["=", 301.5]}]}"#;
    check_attributes(
        policy,
        &[
            (&[("price_usd", "Number", "301.5")], true),
            (&[("price_usd", "Number", "3.015e2")], true),
            (&[("price_usd", "Number", "301.500001")], true),
            (&[("price_usd", "Number", "301.50001")], false),
            (&[("price_usd", "Number", "-301.5")], false),
            (&[("price_usd", "String", "301.5")], false),
            (&[("price_usd", "Number", "NaN")], false),
            (&[("price_usd", "Number", "inf")], false),
            (&[], false),
        ],
    );
    check_body(
        policy,
        &[
            (r#"{"price_usd": 301.5}"#, true),
            (r#"{"price_usd": 3.015e2}"#, true),
            (r#"{"price_usd": 301}"#, false),
            (r#"{"price_usd": "301.5"}"#, false),
            (r#"{"price_usd": [1, 301.5]}"#, true),
        ],
    );
}

#[test]
fn numeric_greater_than() {
    let policy = r#"{"k": [{"numeric": [">", 0]}]}"#;
    check_body(
        policy,
        &[
            (r#"{"k": 0}"#, false),
            (r#"{"k": -0.0}"#, false),
            (r#"{"k": 0.00001}"#, true),
            (r#"{"k": 0.000001}"#, false),
            (r#"{"k": -1}"#, false),
            (r#"{"k": 1}"#, true),
            (r#"{"k": 1000000000}"#, true),
            (r#"{"k": 5e20}"#, true),
            (r#"{"k": -5e20}"#, false),
            (r#"{"k": "5"}"#, false),
            (r#"{"k": true}"#, false),
            (r#"{"k": null}"#, false),
            (r#"{"k": [-1, -2]}"#, false),
            (r#"{"k": [-1, 2]}"#, true),
            (r#"{"k": [[-1], [[2]]]}"#, true),
        ],
    );
    check_attributes(
        policy,
        &[
            (&[("k", "Number", "1")], true),
            (&[("k", "Number", "0")], false),
            (&[("k", "Number", "1e-3")], true),
            (&[("k", "Number.int", "7")], true),
            (&[("k", "String", "7")], false),
            (&[("k", "String.Array", "[-1, 3]")], true),
            (&[("k", "String.Array", r#"["3"]"#)], false),
        ],
    );
}

#[test]
fn numeric_greater_or_equal_and_less() {
    check_body(
        r#"{"k": [{"numeric": [">=", 10]}]}"#,
        &[
            (r#"{"k": 10}"#, true),
            (r#"{"k": 9.99999}"#, false),
            (r#"{"k": 9.999999}"#, true),
            (r#"{"k": 11}"#, true),
        ],
    );
    check_body(
        r#"{"k": [{"numeric": ["<", 0]}]}"#,
        &[
            (r#"{"k": -1}"#, true),
            (r#"{"k": 0}"#, false),
            (r#"{"k": -0.00001}"#, true),
            (r#"{"k": -0.000001}"#, false),
            (r#"{"k": 1}"#, false),
        ],
    );
    check_body(
        r#"{"k": [{"numeric": ["<=", 10]}]}"#,
        &[
            (r#"{"k": 10}"#, true),
            (r#"{"k": 10.000001}"#, true),
            (r#"{"k": 10.00001}"#, false),
            (r#"{"k": -1000000}"#, true),
        ],
    );
}

#[test]
fn numeric_ranges() {
    let policy = r#"{"price": [{"numeric": [">=", 0, "<", 150]}]}"#;
    check_attributes(
        policy,
        &[
            (&[("price", "Number", "0")], true),
            (&[("price", "Number", "100")], true),
            (&[("price", "Number", "149.99999")], true),
            (&[("price", "Number", "150")], false),
            (&[("price", "Number", "-0.5")], false),
            (&[("price", "Number", "1e3")], false),
            (&[("price", "String.Array", "[200, 50]")], true),
            (&[("price", "String.Array", "[200, -50]")], false),
        ],
    );
    check_body(
        r#"{"k": [{"numeric": [">", 10, "<=", 20]}]}"#,
        &[
            (r#"{"k": 10}"#, false),
            (r#"{"k": 10.00001}"#, true),
            (r#"{"k": 15}"#, true),
            (r#"{"k": 20}"#, true),
            (r#"{"k": 20.00001}"#, false),
        ],
    );
    check_body(
        r#"{"k": [{"numeric": [">", -1000000000, "<", 1000000000]}]}"#,
        &[
            (r#"{"k": 0}"#, true),
            (r#"{"k": -999999999.99999}"#, true),
            (r#"{"k": 1000000000}"#, false),
            (r#"{"k": -1000000000}"#, false),
        ],
    );
}

#[test]
fn numeric_conditions_in_one_list_are_alternatives() {
    check_body(
        r#"{"k": [{"numeric": ["<", 0]}, {"numeric": [">", 100]}, 50]}"#,
        &[
            (r#"{"k": -1}"#, true),
            (r#"{"k": 101}"#, true),
            (r#"{"k": 50}"#, true),
            (r#"{"k": 51}"#, false),
            (r#"{"k": [51, 52]}"#, false),
            (r#"{"k": [51, 150]}"#, true),
        ],
    );
}

#[test]
fn numeric_limits_at_one_billion() {
    check_body(
        r#"{"k": [{"numeric": ["<=", 1000000000]}]}"#,
        &[
            (r#"{"k": 1000000000}"#, true),
            (r#"{"k": 1000000000.00001}"#, false),
        ],
    );
    check_body(
        r#"{"k": [{"numeric": ["=", 0.00001]}]}"#,
        &[
            (r#"{"k": 0.00001}"#, true),
            (r#"{"k": 0.00002}"#, false),
            (r#"{"k": 0}"#, false),
        ],
    );
}
