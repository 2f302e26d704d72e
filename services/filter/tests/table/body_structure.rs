//! The `body` scope's structure: nesting, arrays, dotted keys, and bodies that are not JSON
//! objects.

use super::support::check_body;

#[test]
fn nested_policies_follow_the_body() {
    let policy = r#"{"patient": {"address": {"city": ["Seattle"]}}}"#;
    check_body(
        policy,
        &[
            (r#"{"patient": {"address": {"city": "Seattle"}}}"#, true),
            (r#"{"patient": {"address": {"city": "Portland"}}}"#, false),
            (r#"{"patient": {"address": "Seattle"}}"#, false),
            (r#"{"patient": {"city": "Seattle"}}"#, false),
            (r#"{"city": "Seattle"}"#, false),
            (
                r#"{"patient": {"address": {"city": ["Portland", "Seattle"]}}}"#,
                true,
            ),
            (
                r#"{"patient": [{"address": {"city": "Portland"}}, {"address": {"city": "Seattle"}}]}"#,
                true,
            ),
            (r#"{"patient": {"address": [[{"city": "Seattle"}]]}}"#, true),
            (
                r#"{"patient": {"address": {"city": {"name": "Seattle"}}}}"#,
                false,
            ),
        ],
    );
}

#[test]
fn arrays_in_bodies_match_if_any_element_matches() {
    let first = r#"{"headers": {"route-to": ["queue1"]}}"#;
    let second = r#"{"headers": {"route-to": ["queue2"]}}"#;
    let bodies = [
        r#"{"headers": {"route-to": ["queue3"]}}"#,
        r#"{"headers": {"route-to": ["queue1"]}}"#,
        r#"{"headers": {"route-to": ["queue2"]}}"#,
        r#"{"headers": {"route-to": ["queue1", "queue2"]}}"#,
    ];
    check_body(
        first,
        &[
            (bodies[0], false),
            (bodies[1], true),
            (bodies[2], false),
            (bodies[3], true),
        ],
    );
    check_body(
        second,
        &[
            (bodies[0], false),
            (bodies[1], false),
            (bodies[2], true),
            (bodies[3], true),
        ],
    );
}

#[test]
fn arrays_of_objects() {
    // AWS-recorded: of these four S3 events, only the first and the last pass.
    let policy = r#"{"Records": {"s3": {"object": {"key": [{"prefix": "auto-"}]}}, "eventName": [{"prefix": "ObjectCreated:"}]}}"#;
    let created = r#"{"Records": [{"eventSource": "aws:s3", "eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": "b"}, "object": {"key": "auto-insurance-2314.xml", "size": 17}}}]}"#;
    let removed = r#"{"Records": [{"eventSource": "aws:s3", "eventName": "ObjectRemoved:Delete", "s3": {"bucket": {"name": "b"}, "object": {"key": "auto-insurance-2314.xml", "size": 17}}}]}"#;
    let home = r#"{"Records": [{"eventSource": "aws:s3", "eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": "b"}, "object": {"key": "home-insurance-2314.xml", "size": 17}}}]}"#;
    let multiple = r#"{"Records": [{"eventName": "ObjectCreated:Put", "s3": {"object": [[{"key": "auto-insurance-2314.xml", "size": 17}]]}}, {"eventName": "ObjectRemoved:Delete", "s3": {"object": {"key": "home-insurance-2314.xml"}}}]}"#;
    check_body(
        policy,
        &[
            (multiple, true),
            (removed, false),
            (home, false),
            (created, true),
        ],
    );
}

#[test]
fn dots_in_keys_match_nesting_and_literal_keys() {
    // AWS-recorded: a `.` in a policy key matches a level of nesting or a literal dot.
    check_body(
        r#"{"object.nested": ["string.value"]}"#,
        &[
            (r#"{"object": {"nested": "string.value"}}"#, true),
            (r#"{"object.nested": "string.value"}"#, true),
            (r#"{"object": {"nested": "test-auto"}}"#, false),
            (r#"{"object": "nested"}"#, false),
        ],
    );
    check_body(
        r#"{"object.nested.test": ["string.value"]}"#,
        &[
            (r#"{"object": {"nested": {"test": "string.value"}}}"#, true),
            (r#"{"object.nested.test": "string.value"}"#, true),
            (r#"{"object.nested": {"test": "string.value"}}"#, true),
            (r#"{"object": {"nested.test": "string.value"}}"#, true),
            (
                r#"{"object": {"nested": {"test": "string.notvalue"}}}"#,
                false,
            ),
        ],
    );
    check_body(
        r#"{"object": {"nested": ["v"]}}"#,
        &[
            (r#"{"object.nested": "v"}"#, true),
            (r#"{"object": {"nested": "v"}}"#, true),
        ],
    );
}

#[test]
fn empty_arrays_and_null_values_in_bodies() {
    // AWS-recorded: an empty array elsewhere in the body does not disturb matching.
    let body = r#"{"version": "0", "resources": [], "detail": {"eventVersion": "", "responseElements": null}}"#;
    check_body(r#"{"detail": {"eventVersion": [""]}}"#, &[(body, true)]);
    check_body(r#"{"resources": [{"exists": true}]}"#, &[(body, false)]);
    check_body(
        r#"{"detail": {"responseElements": [null]}}"#,
        &[(body, true)],
    );
}

#[test]
fn a_body_that_is_not_a_json_object_matches_nothing() {
    for policy in [r#"{}"#, r#"{"k": [{"exists": false}]}"#, r#"{"k": ["v"]}"#] {
        check_body(
            policy,
            &[
                ("", false),
                ("not json", false),
                ("[]", false),
                (r#"[{"k": "v"}]"#, false),
                (r#""k""#, false),
                ("42", false),
                ("null", false),
                ("true", false),
                (r#"{"k": "v""#, false),
            ],
        );
    }
}

#[test]
fn the_empty_policy_matches_every_object() {
    check_body(
        r#"{}"#,
        &[(r#"{}"#, true), (r#"{"anything": [1, {"x": null}]}"#, true)],
    );
}

#[test]
fn several_keys_may_be_satisfied_by_different_array_elements() {
    check_body(
        r#"{"items": {"colour": ["red"], "size": ["L"]}}"#,
        &[
            (r#"{"items": [{"colour": "red", "size": "L"}]}"#, true),
            (
                r#"{"items": [{"colour": "red", "size": "S"}, {"colour": "blue", "size": "L"}]}"#,
                true,
            ),
            (r#"{"items": [{"colour": "blue", "size": "S"}]}"#, false),
        ],
    );
}

#[test]
fn deep_bodies_and_long_arrays() {
    let deep = format!("{}\"v\"{}", r#"{"a": "#.repeat(100), "}".repeat(100));
    check_body(
        &format!("{{{}}}", r#""a": {"a": {"a": ["v"]}}"#),
        &[(r#"{"a": {"a": {"a": "v"}}}"#, true), (&deep, false)],
    );
    let long: Vec<String> = (0..10_000).map(|index| index.to_string()).collect();
    let body = format!(r#"{{"k": [{}]}}"#, long.join(","));
    check_body(r#"{"k": [9999]}"#, &[(&body, true)]);
    check_body(r#"{"k": [10000]}"#, &[(&body, false)]);
}
