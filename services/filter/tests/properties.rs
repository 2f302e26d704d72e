//! Property tests: matching never panics and is deterministic on arbitrary messages and
//! policies, `explain_*` agrees with `matches_*`, and exact-value policies match their value.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::Value;
use sluice_filter::{AttributeValue, FilterPolicy, FilterScope};

/// Policies covering every operator, valid in both scopes.
const FLAT_POLICIES: &[&str] = &[
    r#"{"k": ["rugby", 100, null, true]}"#,
    r#"{"k": [{"prefix": "ord"}, {"suffix": "1"}, {"equals-ignore-case": "TENNIS"}]}"#,
    r#"{"k": [{"anything-but": ["rugby", 100]}], "a": [{"anything-but": {"prefix": "x"}}]}"#,
    r#"{"price": [{"numeric": [">=", 0, "<", 150]}, {"numeric": ["=", -3.5]}]}"#,
    r#"{"k": [{"exists": true}], "b": [{"exists": false}]}"#,
    r#"{"ip": [{"cidr": "10.0.0.0/8"}, {"cidr": "::/1"}]}"#,
    r#"{"a.b": ["x"], "$or": [{"k": [{"exists": true}]}, {"price": [{"numeric": ["<", 5]}]}]}"#,
    r#"{}"#,
];

/// Nested policies for the body scope.
const BODY_POLICIES: &[&str] = &[
    r#"{"a": {"b": ["x", 1], "k": [{"prefix": ""}]}}"#,
    r#"{"a": {"$or": [{"b": [{"exists": false}]}, {"a.b": [{"anything-but": "x"}]}]}, "k": [null]}"#,
    r#"{"a": {"a": {"a": [{"numeric": [">", 0]}]}}}"#,
];

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec!["k", "a", "b", "a.b", "price", "ip", "$or", ""])
            .prop_map(str::to_owned),
        "[a-z.]{0,4}",
    ]
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e12f64..1e12).prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "\\PC{0,8}".prop_map(Value::String),
        prop::sample::select(vec![
            "10.0.0.1", "::1", "rugby", "TeNNis", "order-1", "100", "x"
        ])
        .prop_map(|text| Value::String(text.to_owned())),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

fn attributes() -> impl Strategy<Value = BTreeMap<String, AttributeValue>> {
    let data_type = prop_oneof![
        prop::sample::select(vec![
            "String",
            "Number",
            "String.Array",
            "Binary",
            "Number.int",
            "String.x"
        ])
        .prop_map(str::to_owned),
        "\\PC{0,12}",
    ];
    let value = prop_oneof![
        "\\PC{0,16}",
        json().prop_map(|value| value.to_string()),
        any::<f64>().prop_map(|number| number.to_string()),
    ];
    prop::collection::btree_map(key(), (data_type, value), 0..6).prop_map(|map| {
        map.into_iter()
            .map(|(name, (data_type, value))| (name, AttributeValue::new(data_type, value)))
            .collect()
    })
}

fn compiled(scope: FilterScope) -> Vec<FilterPolicy> {
    let extra: &[&str] = if scope == FilterScope::Body {
        BODY_POLICIES
    } else {
        &[]
    };
    FLAT_POLICIES
        .iter()
        .chain(extra)
        .map(|text| FilterPolicy::parse(*text, scope).expect("fixture policies are valid"))
        .collect()
}

/// A scalar an exact-value policy can hold, with its attribute type and text.
fn scalar() -> impl Strategy<Value = (Value, &'static str, String)> {
    prop_oneof![
        "\\PC{0,12}".prop_map(|text| (Value::String(text.clone()), "String", text)),
        (-1e9f64..=1e9).prop_map(|number| (Value::from(number), "Number", number.to_string())),
        (-1_000_000_000i64..=1_000_000_000).prop_map(|number| (
            Value::from(number),
            "Number",
            number.to_string()
        )),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bodies_never_panic_and_match_deterministically(body in json()) {
        let text = body.to_string();
        for policy in compiled(FilterScope::Body) {
            let first = policy.matches_body(&text);
            prop_assert_eq!(first, policy.matches_body(&text));
            prop_assert_eq!(first, policy.matches_body_json(&body));
            prop_assert_eq!(first, policy.explain_body(&text).is_ok());
            if !body.is_object() {
                prop_assert!(!first);
            }
        }
    }

    #[test]
    fn arbitrary_text_bodies_never_panic(text in "\\PC{0,64}") {
        for policy in compiled(FilterScope::Body) {
            prop_assert_eq!(policy.matches_body(&text), policy.explain_body(&text).is_ok());
        }
    }

    #[test]
    fn arbitrary_attributes_never_panic_and_match_deterministically(message in attributes()) {
        for policy in compiled(FilterScope::Attributes) {
            let first = policy.matches_attributes(&message);
            prop_assert_eq!(first, policy.matches_attributes(&message));
            prop_assert_eq!(first, policy.explain_attributes(&message).is_ok());
        }
    }

    #[test]
    fn arbitrary_policies_never_panic(policy in json(), body in json(), message in attributes()) {
        let text = body.to_string();
        for scope in [FilterScope::Attributes, FilterScope::Body] {
            match FilterPolicy::parse(&policy, scope) {
                Ok(compiled) => {
                    prop_assert_eq!(compiled.matches_body(&text), compiled.explain_body(&text).is_ok());
                    prop_assert_eq!(
                        compiled.matches_attributes(&message),
                        compiled.explain_attributes(&message).is_ok()
                    );
                }
                Err(error) => prop_assert!(error.to_string().starts_with("filter_policy: ")),
            }
        }
    }

    #[test]
    fn an_exact_value_policy_matches_its_value(
        name in key().prop_filter("$or is an operator", |name| name != "$or"),
        (value, data_type, text) in scalar(),
    ) {
        let policy = serde_json::json!({ name.clone(): [value.clone()] });
        let body = serde_json::json!({ name.clone(): value }).to_string();
        let body_policy = FilterPolicy::parse(&policy, FilterScope::Body).unwrap();
        prop_assert!(body_policy.matches_body(&body), "{} on {}", policy, body);
        let attribute_policy = FilterPolicy::parse(&policy, FilterScope::Attributes).unwrap();
        let message = BTreeMap::from([(name, AttributeValue::new(data_type, text))]);
        prop_assert!(attribute_policy.matches_attributes(&message), "{} on {:?}", policy, message);
    }

    #[test]
    fn exists_true_and_exists_false_partition_object_bodies(name in key(), body in json()) {
        prop_assume!(name != "$or");
        let present = FilterPolicy::parse(&serde_json::json!({ name.clone(): [{"exists": true}] }), FilterScope::Body).unwrap();
        let absent = FilterPolicy::parse(&serde_json::json!({ name: [{"exists": false}] }), FilterScope::Body).unwrap();
        let text = body.to_string();
        if body.is_object() {
            prop_assert_ne!(present.matches_body(&text), absent.matches_body(&text));
        } else {
            prop_assert!(!present.matches_body(&text) && !absent.matches_body(&text));
        }
    }
}
