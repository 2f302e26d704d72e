//! What a policy costs: a compiled policy's heap stays within a constant times its source
//! (however its `$or`s multiply out or its keys repeat), and matching a body costs about the
//! body's size (however many dots a key has or alternatives an `$or` makes).

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice_filter::{FilterPolicy, FilterScope};

/// The bound the crate docs state.
fn assert_proportional(policy: &str, scope: FilterScope) -> FilterPolicy {
    let compiled = FilterPolicy::parse(policy, scope).unwrap();
    let heap = compiled.heap_size();
    let bound = 48 * policy.len() + 4096;
    println!("{} byte policy: {heap} bytes compiled", policy.len());
    assert!(
        heap <= bound,
        "a {} byte policy compiled to {heap} bytes (bound {bound})",
        policy.len()
    );
    compiled
}

fn or_of(branches: usize, key: impl Fn(usize) -> String) -> Value {
    Value::Array((0..branches).map(|i| json!({ key(i): [1] })).collect())
}

#[test]
fn a_long_key_beside_an_or_is_held_once() {
    // The issue's shape: a 200 KB key in every one of 149 alternatives (expanded, ~30 MB).
    let long = "k".repeat(200_000);
    for scope in [FilterScope::Attributes, FilterScope::Body] {
        let policy = json!({ &long: ["x"], "$or": or_of(149, |i| format!("b{i}")) }).to_string();
        let compiled = assert_proportional(&policy, scope);
        assert!(
            compiled.heap_size() < 3 * policy.len(),
            "{}",
            compiled.heap_size()
        );
    }
    // The same under a nested long key (body scope), and a long key inside each branch.
    let policy = json!({ &long: { "$or": or_of(75, |i| format!("b{i}")) } }).to_string();
    assert_proportional(&policy, FilterScope::Body);
    let policy = json!({ "$or": or_of(149, |i| format!("{}{i}", "d".repeat(1500))) }).to_string();
    assert_proportional(&policy, FilterScope::Body);
}

#[test]
fn small_keys_and_many_conditions_stay_within_the_bound() {
    for scope in [FilterScope::Attributes, FilterScope::Body] {
        assert_proportional(r#"{"a": [1]}"#, scope);
        assert_proportional(
            &json!({ "$or": or_of(150, |i| format!("{i}")) }).to_string(),
            scope,
        );
        let many: Vec<Value> = (0..150).map(|i| json!(i)).collect();
        assert_proportional(&json!({ "a": many }).to_string(), scope);
        let dots = ".".repeat(200_000);
        assert_proportional(&json!({ dots: [1] }).to_string(), scope);
    }
    assert_proportional(
        &json!({"a": {"b": {"c": {"d": {"e": {"f": [1]}}}}}}).to_string(),
        FilterScope::Body,
    );
}

/// Matching in a debug build stays far below this; before the single walk, the first case
/// took about 38 s in a release build.
const QUICK: Duration = Duration::from_millis(500);

fn time_body(policy: &Value, body: &str) -> (bool, Duration) {
    let compiled = FilterPolicy::parse(policy, FilterScope::Body).unwrap();
    let started = Instant::now();
    let matched = compiled.matches_body(body);
    let explained = compiled.explain_body(body).is_ok();
    assert_eq!(matched, explained);
    (matched, started.elapsed())
}

#[test]
fn a_key_of_many_dots_against_many_objects_matches_quickly() {
    let dots = ".".repeat(20_000);
    let policy = json!({ &dots: [1], "$or": or_of(4, |i| format!("b{i}")) });
    let objects = vec!["{}"; 20_000].join(",");
    for body in [
        format!(r#"{{"": [{objects}], "b0": 1}}"#),
        format!(r#"{{"b1": 1, "": [{objects}], ".": [{objects}]}}"#),
        format!("[{objects}]"),
    ] {
        let (matched, took) = time_body(&policy, &body);
        assert!(!matched);
        assert!(took < QUICK, "took {took:?}");
    }
    // The walk still finds the leaf at the end of the dots, however the body splits them.
    let body = format!(r#"{{"": {{"{}": [1]}}, "b2": 1}}"#, ".".repeat(19_999));
    let (matched, took) = time_body(&policy, &body);
    assert!(matched);
    assert!(took < QUICK, "took {took:?}");
}

#[test]
fn many_alternatives_over_a_large_body_match_quickly() {
    // 150 distinct paths sharing a prefix, against 20,000 objects under it.
    let policy = json!({ "a": { "$or": or_of(75, |i| format!("k{i}")) } });
    let element = (0..20)
        .map(|i| format!(r#""k{i}x": 0"#))
        .collect::<Vec<_>>()
        .join(",");
    let body = format!(
        r#"{{"a": [{}]}}"#,
        vec![format!("{{{element}}}"); 2_000].join(",")
    );
    let (matched, took) = time_body(&policy, &body);
    assert!(!matched);
    assert!(took < QUICK, "took {took:?}");
}
