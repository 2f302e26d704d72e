//! `prefix`, `suffix` and `equals-ignore-case`: strings only, never numbers.

use super::support::{check_attributes, check_body};

#[test]
fn prefix_on_attributes() {
    check_attributes(
        r#"{"customer_interests": [{"prefix": "bas"}]}"#,
        &[
            (&[("customer_interests", "String", "baseball")], true),
            (&[("customer_interests", "String", "basketball")], true),
            (&[("customer_interests", "String", "bas")], true),
            (&[("customer_interests", "String", "ba")], false),
            (&[("customer_interests", "String", "Baseball")], false),
            (&[("customer_interests", "String", "rugby")], false),
            (&[("customer_interests", "String", " baseball")], false),
            (
                &[(
                    "customer_interests",
                    "String.Array",
                    r#"["rugby", "basket"]"#,
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
            (&[("customer_interests", "Binary", "baseball")], false),
            (&[], false),
        ],
    );
}

#[test]
fn prefix_on_bodies() {
    check_body(
        r#"{"customer_interests": [{"prefix": "bas"}]}"#,
        &[
            (r#"{"customer_interests": "baseball"}"#, true),
            (r#"{"customer_interests": "rugby"}"#, false),
            (r#"{"customer_interests": ["rugby", "basketball"]}"#, true),
            (r#"{"customer_interests": null}"#, false),
            (r#"{}"#, false),
        ],
    );
    check_body(
        r#"{"n": [{"prefix": "1"}]}"#,
        &[(r#"{"n": 123}"#, false), (r#"{"n": "123"}"#, true)],
    );
}

#[test]
fn empty_and_unicode_prefixes() {
    check_body(
        r#"{"k": [{"prefix": ""}]}"#,
        &[
            (r#"{"k": "anything"}"#, true),
            (r#"{"k": ""}"#, true),
            (r#"{"k": 1}"#, false),
            (r#"{}"#, false),
        ],
    );
    check_body(
        r#"{"k": [{"prefix": "é"}]}"#,
        &[
            (r#"{"k": "école"}"#, true),
            (r#"{"k": "ecole"}"#, false),
            (r#"{"k": "😀é"}"#, false),
        ],
    );
}

#[test]
fn suffix_on_attributes_and_bodies() {
    let policy = r#"{"customer_interests": [{"suffix": "ball"}]}"#;
    check_attributes(
        policy,
        &[
            (&[("customer_interests", "String", "baseball")], true),
            (&[("customer_interests", "String", "basketball")], true),
            (&[("customer_interests", "String", "ball")], true),
            (&[("customer_interests", "String", "all")], false),
            (&[("customer_interests", "String", "BALL")], false),
            (&[("customer_interests", "String", "balls")], false),
            (
                &[(
                    "customer_interests",
                    "String.Array",
                    r#"["rugby", "football"]"#,
                )],
                true,
            ),
            (&[("customer_interests", "Number", "5")], false),
        ],
    );
    check_body(
        policy,
        &[
            (r#"{"customer_interests": "baseball"}"#, true),
            (r#"{"customer_interests": "rugby"}"#, false),
            (r#"{"customer_interests": ["football"]}"#, true),
            (r#"{"customer_interests": 10}"#, false),
        ],
    );
    check_body(
        r#"{"file": [{"suffix": ".png"}, {"suffix": ".jpg"}]}"#,
        &[
            (r#"{"file": "a.png"}"#, true),
            (r#"{"file": "a.jpg"}"#, true),
            (r#"{"file": "a.gif"}"#, false),
            (r#"{"file": "a.png.gif"}"#, false),
        ],
    );
}

#[test]
fn equals_ignore_case_on_attributes_and_bodies() {
    let policy = r#"{"customer_interests": [{"equals-ignore-case": "tennis"}]}"#;
    check_attributes(
        policy,
        &[
            (&[("customer_interests", "String", "tennis")], true),
            (&[("customer_interests", "String", "TENNIS")], true),
            (&[("customer_interests", "String", "Tennis")], true),
            (&[("customer_interests", "String", "tEnNiS")], true),
            (&[("customer_interests", "String", "tennis ")], false),
            (&[("customer_interests", "String", "tenni")], false),
            (&[("customer_interests", "String", "tenniss")], false),
            (
                &[(
                    "customer_interests",
                    "String.Array",
                    r#"["Rugby", "TENNIS"]"#,
                )],
                true,
            ),
            (
                &[("customer_interests", "String.Array", r#"["Rugby"]"#)],
                false,
            ),
        ],
    );
    check_body(
        policy,
        &[
            (r#"{"customer_interests": "TeNnIs"}"#, true),
            (r#"{"customer_interests": "rugby"}"#, false),
            (r#"{"customer_interests": ["x", "TENNIS"]}"#, true),
        ],
    );
    check_body(
        r#"{"k": [{"equals-ignore-case": "ÉCOLE"}]}"#,
        &[
            (r#"{"k": "école"}"#, true),
            (r#"{"k": "École"}"#, true),
            (r#"{"k": "ecole"}"#, false),
            (r#"{"k": "écoles"}"#, false),
        ],
    );
    check_body(
        r#"{"k": [{"equals-ignore-case": "ΣΟΦΙΑ"}]}"#,
        &[(r#"{"k": "σοφια"}"#, true), (r#"{"k": "σοφ"}"#, false)],
    );
}
