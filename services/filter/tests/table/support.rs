//! Helpers that run one policy against a table of messages.

use std::collections::BTreeMap;

use sluice_filter::{AttributeValue, FilterPolicy, FilterScope, PolicyError};

/// One attribute: (name, data type, value).
pub(crate) type Attr<'a> = (&'a str, &'a str, &'a str);

pub(crate) fn attributes(list: &[Attr<'_>]) -> BTreeMap<String, AttributeValue> {
    list.iter()
        .map(|(name, data_type, value)| {
            ((*name).to_owned(), AttributeValue::new(*data_type, *value))
        })
        .collect()
}

fn compile(policy: &str, scope: FilterScope) -> FilterPolicy {
    match FilterPolicy::parse(policy, scope) {
        Ok(policy) => policy,
        Err(error) => panic!("policy {policy} should be valid for {scope:?}: {error}"),
    }
}

/// Runs attribute-scope cases: (attributes, expected match).
pub(crate) fn check_attributes(policy: &str, cases: &[(&[Attr<'_>], bool)]) {
    let compiled = compile(policy, FilterScope::Attributes);
    for (list, expected) in cases {
        let message = attributes(list);
        assert_eq!(
            compiled.matches_attributes(&message),
            *expected,
            "policy {policy} on attributes {list:?}"
        );
        assert_eq!(
            compiled.explain_attributes(&message).is_ok(),
            *expected,
            "explain of policy {policy} on attributes {list:?}"
        );
    }
}

/// Runs body-scope cases: (body text, expected match).
pub(crate) fn check_body(policy: &str, cases: &[(&str, bool)]) {
    let compiled = compile(policy, FilterScope::Body);
    for (body, expected) in cases {
        assert_eq!(
            compiled.matches_body(body),
            *expected,
            "policy {policy} on body {body}"
        );
        assert_eq!(
            compiled.explain_body(body).is_ok(),
            *expected,
            "explain of policy {policy} on body {body}"
        );
    }
}

/// Whether `policy` is valid in `scope`.
pub(crate) fn accepted(policy: &str, scope: FilterScope) -> bool {
    FilterPolicy::parse(policy, scope).is_ok()
}

/// Asserts `policy` is rejected in `scope` with a message starting `filter_policy: ` and
/// containing `expected`.
pub(crate) fn check_rejected(policy: &str, scope: FilterScope, expected: &str) -> PolicyError {
    match FilterPolicy::parse(policy, scope) {
        Ok(_) => panic!("policy {policy} should be rejected in {scope:?}"),
        Err(error) => {
            let message = error.to_string();
            assert!(
                message.starts_with("filter_policy: "),
                "message {message:?} lacks the prefix"
            );
            assert!(
                message.contains(expected),
                "message {message:?} for {policy} should contain {expected:?}"
            );
            error
        }
    }
}
