//! Every validation error, with its `filter_policy: ` message, and SNS's limits (keys,
//! combinations as SNS counts them, size).

use serde_json::json;
use sluice_filter::{FilterPolicy, FilterScope, PolicyError};

use super::support::{accepted, check_rejected};

const BOTH: [FilterScope; 2] = [FilterScope::Attributes, FilterScope::Body];

fn rejected_in_both(policy: &str, expected: &str) {
    for scope in BOTH {
        check_rejected(policy, scope, expected);
    }
}

#[test]
fn the_policy_must_be_a_json_object() {
    rejected_in_both("", "not valid JSON");
    rejected_in_both("{", "not valid JSON");
    rejected_in_both(r#"{"k": ["v"],}"#, "not valid JSON");
    for policy in ["[]", r#""k""#, "1", "null", "true", r#"[{"k": ["v"]}]"#] {
        rejected_in_both(policy, "policy must be a JSON object");
    }
    assert!(matches!(
        FilterPolicy::parse(&json!(["k"]), FilterScope::Body),
        Err(PolicyError::NotAnObject)
    ));
}

#[test]
fn values_must_be_lists_or_objects() {
    rejected_in_both(
        r#"{"key_a": "value_one"}"#,
        r#""key_a" must be an object or an array"#,
    );
    rejected_in_both(r#"{"k": 1}"#, r#""k" must be an object or an array"#);
    rejected_in_both(r#"{"k": null}"#, r#""k" must be an object or an array"#);
    rejected_in_both(r#"{"k": true}"#, r#""k" must be an object or an array"#);
    // An operator written without its list is a nested key whose value is a scalar.
    rejected_in_both(
        r#"{"key": {"suffix": "value"}}"#,
        r#""suffix" must be an object or an array"#,
    );
    rejected_in_both(
        r#"{"key": {"not-an-operator": "value"}}"#,
        r#""not-an-operator" must be an object or an array"#,
    );
}

#[test]
fn nesting_is_only_for_the_body_scope() {
    let nested = r#"{"a": {"b": ["v"]}}"#;
    check_rejected(
        nested,
        FilterScope::Attributes,
        "Filter policy scope MessageAttributes does not support nested filter policy",
    );
    assert!(accepted(nested, FilterScope::Body));
    assert!(accepted(r#"{"a.b": ["v"]}"#, FilterScope::Attributes));
}

#[test]
fn empty_lists_and_objects_are_rejected() {
    rejected_in_both(r#"{"key": []}"#, "Empty arrays are not allowed");
    rejected_in_both(
        r#"{"key": [{"anything-but": []}]}"#,
        "Empty arrays are not allowed",
    );
    check_rejected(
        r#"{"a": {}}"#,
        FilterScope::Body,
        r#""a" must not be an empty object"#,
    );
    rejected_in_both(
        r#"{"$or": [{}, {"a": ["1"]}]}"#,
        r#""$or" must not be an empty object"#,
    );
    assert!(accepted("{}", FilterScope::Attributes));
    assert!(accepted("{}", FilterScope::Body));
}

#[test]
fn match_values_must_be_scalars_or_operators() {
    rejected_in_both(
        r#"{"key": [["value"]]}"#,
        "Match value must be String, number, true, false, or null",
    );
    rejected_in_both(
        r#"{"key": [{"wrong-operator": true}]}"#,
        "Unrecognized match type wrong-operator",
    );
    rejected_in_both(
        r#"{"key": [{"suffix": "value", "prefix": "value2"}]}"#,
        "Only one key allowed in match expression",
    );
    rejected_in_both(
        r#"{"key": [{}]}"#,
        "Only one key allowed in match expression",
    );
}

#[test]
fn string_operators_need_strings() {
    for operator in ["prefix", "suffix", "equals-ignore-case"] {
        for operand in [
            "100",
            "null",
            "[]",
            r#"["test", "test2"]"#,
            "true",
            r#"{"a": "b"}"#,
        ] {
            rejected_in_both(
                &format!(r#"{{"key": [{{"{operator}": {operand}}}]}}"#),
                &format!("{operator} match pattern must be a string"),
            );
        }
    }
}

#[test]
fn exists_needs_a_boolean() {
    for operand in ["null", r#""no""#, "1", "[]", r#"{"a": true}"#] {
        rejected_in_both(
            &format!(r#"{{"key": [{{"exists": {operand}}}]}}"#),
            "exists match pattern must be either true or false.",
        );
    }
}

#[test]
fn anything_but_operands() {
    rejected_in_both(
        r#"{"key": [{"anything-but": {"wrong-operator": null}}]}"#,
        "Unsupported anything-but pattern: wrong-operator",
    );
    rejected_in_both(
        r#"{"key": [{"anything-but": {"suffix": "test"}}]}"#,
        "Unsupported anything-but pattern: suffix",
    );
    rejected_in_both(
        r#"{"key": [{"anything-but": {"exists": false}}]}"#,
        "Unsupported anything-but pattern: exists",
    );
    rejected_in_both(
        r#"{"key": [{"anything-but": {"prefix": false}}]}"#,
        "prefix match pattern must be a string",
    );
    rejected_in_both(
        r#"{"key": [{"anything-but": {"prefix": "a", "suffix": "b"}}]}"#,
        "Only one key allowed in match expression",
    );
    for operand in [
        "null",
        "true",
        r#"["a", null]"#,
        r#"[["a"]]"#,
        r#"[{"prefix": "a"}]"#,
    ] {
        rejected_in_both(
            &format!(r#"{{"key": [{{"anything-but": {operand}}}]}}"#),
            "anything-but values must be strings or numbers",
        );
    }
}

#[test]
fn numeric_grammar() {
    let cases = [
        (r#"[]"#, "Invalid member in numeric match: ]"),
        (
            r#"["operator"]"#,
            "Unrecognized numeric range operator: operator",
        ),
        (r#"[1, "<="]"#, "Invalid member in numeric match: 1"),
        (r#"["=", "000"]"#, "Value of equals must be numeric"),
        (r#"[">="]"#, "Value of >= must be numeric"),
        (
            r#"["<", 100, ">", 10]"#,
            "Too many elements in numeric expression",
        ),
        (
            r#"["=", 1, "<", 10]"#,
            "Too many elements in numeric expression",
        ),
        (
            r#"["<=", 1, "<", 10]"#,
            "Too many elements in numeric expression",
        ),
        (r#"[">=", 1, ">", 2]"#, "Bad numeric range operator: >"),
        (r#"[">", 3, "<", 1]"#, "Bottom must be less than top"),
        (r#"[">", 3, "<=", 3]"#, "Bottom must be less than top"),
        (r#"[">", 20, "<="]"#, "Value of <= must be numeric"),
        (r#"[">", 20, 30]"#, "Bad value in numeric range: 30"),
        (r#"[">", 20, "test"]"#, "Bad numeric range operator: test"),
        (r#"[">", "20", "<", "30"]"#, "Value of > must be numeric"),
        (r#"[">", 20, "<", "30"]"#, "Value of < must be numeric"),
        (
            r#"[">", 20, "<", 30, "<", 50]"#,
            "Too many terms in numeric range expression",
        ),
        (r#"[">", 1000000001]"#, "outside -1000000000..=1000000000"),
        (r#"["<", -1e10]"#, "outside -1000000000..=1000000000"),
        (
            r#"[">", 0, "<", 2000000000]"#,
            "outside -1000000000..=1000000000",
        ),
    ];
    for (operand, expected) in cases {
        rejected_in_both(
            &format!(r#"{{"key": [{{"numeric": {operand}}}]}}"#),
            expected,
        );
    }
    assert!(accepted(
        r#"{"key": [1e12, {"anything-but": -1e12}]}"#,
        FilterScope::Body
    ));
    rejected_in_both(
        r#"{"key": [{"numeric": ">"}]}"#,
        "numeric match pattern must be an array",
    );
    rejected_in_both(
        r#"{"key": [{"numeric": 5}]}"#,
        "numeric match pattern must be an array",
    );
    for operand in [
        r#"["=", 1000000000]"#,
        r#"[">=", -1000000000, "<=", 1000000000]"#,
        r#"["<", 0.00001]"#,
    ] {
        assert!(accepted(
            &format!(r#"{{"key": [{{"numeric": {operand}}}]}}"#),
            FilterScope::Body
        ));
    }
}

#[test]
fn cidr_operands() {
    let cases = [
        (r#"["bad-filter"]"#, "cidr match pattern must be a string"),
        ("10", "cidr match pattern must be a string"),
        (r#""bad-filter""#, "Malformed CIDR, one '/' required"),
        (r#""10.0.0.0""#, "Malformed CIDR, one '/' required"),
        (r#""10.0.0.0/8/8""#, "Malformed CIDR, one '/' required"),
        (
            r#""bad-filter/""#,
            "Malformed CIDR, mask bits must be an integer",
        ),
        (
            r#""10.0.0.0/x""#,
            "Malformed CIDR, mask bits must be an integer",
        ),
        (
            r#""10.0.0.0/-1""#,
            "Malformed CIDR, mask bits must be an integer",
        ),
        (r#""bad-filter/64""#, "Nonstandard IP address: bad-filter"),
        (r#""xx.11.xx/8""#, "Nonstandard IP address: xx.11.xx"),
        (
            r#""xxxx:db8:1234:1a00::/64""#,
            "Nonstandard IP address: xxxx:db8:1234:1a00::",
        ),
        (r#""10.0.0.0/33""#, "mask bits 33 exceed 32"),
        (r#""::/129""#, "mask bits 129 exceed 128"),
    ];
    for (operand, expected) in cases {
        rejected_in_both(&format!(r#"{{"key": [{{"cidr": {operand}}}]}}"#), expected);
    }
}

#[test]
fn or_must_be_a_list_of_objects() {
    for or in [
        r#""a""#,
        "[]",
        r#"[{"a": ["1"]}]"#,
        r#"[{"a": ["1"]}, "b"]"#,
        r#"{"a": ["1"]}"#,
        r#"[["a"], ["b"]]"#,
    ] {
        rejected_in_both(
            &format!(r#"{{"$or": {or}}}"#),
            "$or must be an array of at least two objects",
        );
    }
}

#[test]
fn at_most_five_keys() {
    let five = r#"{"k1": ["v"], "k2": ["v"], "k3": ["v"], "k4": ["v"], "k5": ["v"]}"#;
    let six = r#"{"k1": ["v"], "k2": ["v"], "k3": ["v"], "k4": ["v"], "k5": ["v"], "k6": ["v"]}"#;
    for scope in BOTH {
        assert!(accepted(five, scope));
        check_rejected(six, scope, "Filter policy can not have more than 5 keys");
    }
    // Nested keys count as their top-level parent.
    assert!(accepted(
        r#"{"a": {"x": ["1"], "y": ["1"], "z": ["1"], "w": ["1"], "u": ["1"], "t": ["1"]}}"#,
        FilterScope::Body
    ));
    // Keys of a top-level `$or` branch are top-level keys of that alternative.
    let seven_over_two = r#"{"k1": ["v"], "k2": ["v"], "k3": ["v"], "k4": ["v"], "$or": [{"k5": ["v"]}, {"k6": ["v"], "k7": ["v"]}]}"#;
    check_rejected(seven_over_two, FilterScope::Attributes, "found 6");
    let five_per_alternative = r#"{"k1": ["v"], "k2": ["v"], "k3": ["v"], "k4": ["v"], "$or": [{"k5": ["v"]}, {"k6": ["v"]}]}"#;
    assert!(accepted(five_per_alternative, FilterScope::Attributes));
}

fn values(count: usize) -> String {
    let list: Vec<String> = (0..count)
        .map(|index| format!("\"value{index}\""))
        .collect();
    format!("[{}]", list.join(","))
}

#[test]
fn at_most_150_combinations() {
    for scope in BOTH {
        assert!(accepted(&format!(r#"{{"key": {}}}"#, values(150)), scope));
        check_rejected(
            &format!(r#"{{"key": {}}}"#, values(151)),
            scope,
            "Filter policy is too complex",
        );
        check_rejected(
            &format!(r#"{{"key1": {}, "key2": {}}}"#, values(100), values(51)),
            scope,
            "(5100 combinations; at most 150)",
        );
        assert!(accepted(
            &format!(r#"{{"key1": {}, "key2": {}}}"#, values(10), values(15)),
            scope
        ));
    }
}

#[test]
fn combinations_with_or_add_up() {
    // (4 × 6) + (4 × 4 × 4) + (4 × 4 × 4) = 152, recorded by AWS as too complex.
    let flat = r#"{
        "source": ["aws.cloudwatch", "aws.events", "aws.test", "aws.test2"],
        "$or": [
            {"metricName": ["CPUUtilization", "ReadLatency", "t1", "t2", "t3", "t4"]},
            {"metricType": ["MetricType", "TestType", "TestType2", "TestType3"],
             "$or": [{"metricId": [1234, 4321, 5678, 9012]}, {"spaceId": [1, 2, 3, 4]}]}
        ]
    }"#;
    check_rejected(flat, FilterScope::Attributes, "(152 combinations");
    // (3 × 6) + (3 × 4 × 4) + (3 × 4 × 7) = 150, accepted by AWS.
    let at_limit = r#"{
        "source": ["aws.cloudwatch", "aws.events", "aws.test"],
        "$or": [
            {"metricName": ["CPUUtilization", "ReadLatency", "TestVal", "TestVal2", "TestVal3", "TestVal4"]},
            {"metricType": ["MetricType", "TestType", "TestType2", "TestType3"],
             "$or": [{"metricId": [1234, 4321, 5678, 9012]}, {"spaceId": [1, 2, 3, 4, 5, 6, 7]}]}
        ]
    }"#;
    assert!(accepted(at_limit, FilterScope::Attributes));
    // (3 + 2) × (2·2) × (1·2 + 3·2) = 160 in the body scope, recorded by AWS as too complex.
    let nested = r#"{
        "$or": [{"metricName": ["CPUUtilization", "ReadLatency", "TestValue"]}, {"namespace": ["AWS/EC2", "AWS/ES"]}],
        "detail": {
            "scope": ["Service", "Test"],
            "$or": [{"source": ["aws.cloudwatch"]}, {"type": ["CloudWatch Alarm State Change", "TestValue", "TestValue2"]}]
        }
    }"#;
    check_rejected(nested, FilterScope::Body, "(160 combinations");
}

#[test]
fn nested_lists_count_their_depth() {
    // AWS's worked example: 3 × 4 × 2 × 3 = 72 (values times depth), accepted.
    let documented = r#"{
        "key_a": {"key_b": {"key_c": ["value_one", "value_two", "value_three", "value_four"]}},
        "key_d": {"key_e": ["value_one", "value_two", "value_three"]}
    }"#;
    assert!(accepted(documented, FilterScope::Body));
    // The same with a third top-level key of three values: 72 × 3 = 216, rejected by AWS.
    let too_many = r#"{
        "key_a": {"key_b": {"key_c": ["value_one", "value_two", "value_three", "value_four"]}},
        "key_d": {"key_e": ["value_one", "value_two", "value_three"]},
        "key_f": ["value_one", "value_two", "value_three"]
    }"#;
    check_rejected(too_many, FilterScope::Body, "(216 combinations");
    // 76 values two levels deep count 152.
    check_rejected(
        &format!(r#"{{"a": {{"b": {}}}}}"#, values(76)),
        FilterScope::Body,
        "(152 combinations",
    );
    assert!(accepted(
        &format!(r#"{{"a": {{"b": {}}}}}"#, values(75)),
        FilterScope::Body
    ));
}

#[test]
fn at_most_256_kib() {
    // Compact, so the text and its parsed value measure the same.
    let filler = |length: usize| format!(r#"{{"k":["{}"]}}"#, "a".repeat(length));
    let overhead = filler(0).len();
    let limit = 256 * 1024;
    for scope in BOTH {
        assert!(accepted(&filler(limit - overhead), scope));
        check_rejected(
            &filler(limit - overhead + 1),
            scope,
            "at most 262144 (256 KiB)",
        );
        let value: serde_json::Value = serde_json::from_str(&filler(limit - overhead + 1)).unwrap();
        assert!(matches!(
            FilterPolicy::parse(&value, scope),
            Err(PolicyError::TooLarge { size }) if size == limit + 1
        ));
    }
}

#[test]
fn deep_nesting_is_rejected() {
    let deep = |levels: usize| {
        format!(
            "{}[\"v\"]{}",
            r#"{"a": "#.repeat(levels),
            "}".repeat(levels)
        )
    };
    assert!(accepted(&deep(33), FilterScope::Body));
    check_rejected(
        &deep(34),
        FilterScope::Body,
        "nested more than 32 levels deep",
    );
}

#[test]
fn parse_accepts_text_and_values_alike() {
    let text = r#"{"k": ["v"], "n": [{"numeric": [">", 1]}]}"#;
    let value: serde_json::Value = serde_json::from_str(text).unwrap();
    for scope in BOTH {
        let from_text = FilterPolicy::parse(text, scope).unwrap();
        let from_string = FilterPolicy::parse(&text.to_owned(), scope).unwrap();
        let from_value = FilterPolicy::parse(&value, scope).unwrap();
        assert_eq!(from_text, from_value);
        assert_eq!(from_string, from_value);
        assert_eq!(from_value.scope(), scope);
    }
    assert_eq!(
        FilterScope::from_aws_name("MessageBody"),
        Some(FilterScope::Body)
    );
    assert_eq!(
        FilterScope::from_aws_name("MessageAttributes"),
        Some(FilterScope::Attributes)
    );
    assert_eq!(FilterScope::from_aws_name("RandomValue"), None);
    assert_eq!(FilterScope::Body.aws_name(), "MessageBody");
    assert_eq!(FilterScope::default(), FilterScope::Attributes);
}
