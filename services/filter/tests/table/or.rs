//! `$or`: alternatives at the top level, inside nested body objects, and inside each other.

use super::support::{check_attributes, check_body};

const TOP_LEVEL_OR: &str = r#"{
    "source": ["aws.cloudwatch"],
    "$or": [
        {"metricName": ["CPUUtilization"]},
        {"namespace": ["AWS/EC2"]}
    ]
}"#;

#[test]
fn top_level_or_on_attributes() {
    check_attributes(
        TOP_LEVEL_OR,
        &[
            (
                &[
                    ("source", "String", "aws.cloudwatch"),
                    ("metricName", "String", "CPUUtilization"),
                ],
                true,
            ),
            (
                &[
                    ("source", "String", "aws.cloudwatch"),
                    ("namespace", "String", "AWS/EC2"),
                ],
                true,
            ),
            (
                &[
                    ("source", "String", "aws.cloudwatch"),
                    ("metricName", "String", "ReadLatency"),
                    ("namespace", "String", "AWS/EC2"),
                ],
                true,
            ),
            (
                &[
                    ("source", "String", "aws.cloudwatch"),
                    ("metricName", "String", "ReadLatency"),
                ],
                false,
            ),
            (&[("source", "String", "aws.cloudwatch")], false),
            (
                &[
                    ("metricName", "String", "CPUUtilization"),
                    ("namespace", "String", "AWS/EC2"),
                ],
                false,
            ),
            (
                &[
                    ("source", "String", "aws.events"),
                    ("namespace", "String", "AWS/EC2"),
                ],
                false,
            ),
        ],
    );
}

#[test]
fn top_level_or_on_bodies() {
    check_body(
        TOP_LEVEL_OR,
        &[
            (
                r#"{"source": "aws.cloudwatch", "metricName": "CPUUtilization"}"#,
                true,
            ),
            (
                r#"{"source": "aws.cloudwatch", "namespace": "AWS/EC2"}"#,
                true,
            ),
            (
                r#"{"source": "aws.cloudwatch", "namespace": "AWS/ES"}"#,
                false,
            ),
            (r#"{"metricName": "CPUUtilization"}"#, false),
        ],
    );
}

#[test]
fn or_inside_a_nested_body_object() {
    let policy = r#"{
        "detail": {
            "scope": ["Service"],
            "$or": [
                {"source": ["aws.cloudwatch"]},
                {"type": ["CloudWatch Alarm State Change"]}
            ]
        }
    }"#;
    check_body(
        policy,
        &[
            (
                r#"{"detail": {"scope": "Service", "source": "aws.cloudwatch"}}"#,
                true,
            ),
            (
                r#"{"detail": {"scope": "Service", "type": "CloudWatch Alarm State Change"}}"#,
                true,
            ),
            (
                r#"{"detail": {"scope": "Service", "type": "Other"}}"#,
                false,
            ),
            (r#"{"detail": {"source": "aws.cloudwatch"}}"#, false),
            (r#"{"scope": "Service", "source": "aws.cloudwatch"}"#, false),
        ],
    );
}

#[test]
fn nested_or_and_three_branches() {
    let policy = r#"{
        "source": ["a"],
        "$or": [
            {"x": [1]},
            {"y": [2], "$or": [{"z": [3]}, {"w": [4]}]},
            {"v": [{"exists": true}]}
        ]
    }"#;
    check_body(
        policy,
        &[
            (r#"{"source": "a", "x": 1}"#, true),
            (r#"{"source": "a", "y": 2, "z": 3}"#, true),
            (r#"{"source": "a", "y": 2, "w": 4}"#, true),
            (r#"{"source": "a", "y": 2}"#, false),
            (r#"{"source": "a", "z": 3}"#, false),
            (r#"{"source": "a", "v": null}"#, true),
            (r#"{"source": "b", "x": 1}"#, false),
            (r#"{"source": "a"}"#, false),
        ],
    );
    check_attributes(
        policy,
        &[
            (
                &[
                    ("source", "String", "a"),
                    ("y", "Number", "2"),
                    ("w", "Number", "4"),
                ],
                true,
            ),
            (
                &[
                    ("source", "String", "a"),
                    ("y", "Number", "2"),
                    ("w", "Number", "5"),
                ],
                false,
            ),
        ],
    );
}

#[test]
fn two_top_level_ors_multiply() {
    let policy = r#"{
        "$or": [{"a": ["1"]}, {"b": ["1"]}],
        "c": {"$or": [{"d": ["1"]}, {"e": ["1"]}]}
    }"#;
    check_body(
        policy,
        &[
            (r#"{"a": "1", "c": {"d": "1"}}"#, true),
            (r#"{"b": "1", "c": {"e": "1"}}"#, true),
            (r#"{"a": "1", "c": {"f": "1"}}"#, false),
            (r#"{"c": {"d": "1"}}"#, false),
        ],
    );
}
