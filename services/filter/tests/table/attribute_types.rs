//! Attribute data types: custom suffixes, `Binary` and unknown types, and `String.Array`
//! element types.

use super::support::check_attributes;

#[test]
fn custom_type_suffixes_keep_the_base_type() {
    check_attributes(
        r#"{"k": ["v"]}"#,
        &[
            (&[("k", "String.foo", "v")], true),
            (&[("k", "String.custom.more", "v")], true),
            (&[("k", "Number.int", "v")], false),
            (&[("k", "Binary.jpeg", "v")], false),
        ],
    );
    check_attributes(
        r#"{"k": [5]}"#,
        &[
            (&[("k", "Number.int", "5")], true),
            (&[("k", "Number.float", "5.0")], true),
            (&[("k", "String.foo", "5")], false),
        ],
    );
}

#[test]
fn binary_and_unknown_types_never_match() {
    for data_type in ["Binary", "Binary.png", "Strings", "number", "string", ""] {
        check_attributes(r#"{"k": ["v"]}"#, &[(&[("k", data_type, "v")], false)]);
        check_attributes(
            r#"{"k": [{"prefix": ""}]}"#,
            &[(&[("k", data_type, "v")], false)],
        );
    }
}

#[test]
fn string_array_elements_are_matched_one_by_one() {
    check_attributes(
        r#"{"k": ["a", 2]}"#,
        &[
            (&[("k", "String.Array", r#"["x", "a"]"#)], true),
            (&[("k", "String.Array", r#"["x", 2]"#)], true),
            (&[("k", "String.Array", r#"["x", "2"]"#)], false),
            (&[("k", "String.Array", r#"[{"a": "a"}]"#)], false),
            (&[("k", "String.Array", r#"["x", "a""#)], false),
            (&[("k", "String.Array", r#"{"k": "a"}"#)], false),
            (&[("k", "String", r#"["a"]"#)], false),
        ],
    );
}

#[test]
fn attributes_scope_ignores_body_like_nesting() {
    check_attributes(
        r#"{"a.b": ["v"]}"#,
        &[
            (&[("a.b", "String", "v")], true),
            (&[("a", "String", r#"{"b": "v"}"#)], false),
        ],
    );
}

#[test]
fn the_empty_policy_matches_every_attribute_set() {
    check_attributes(
        "{}",
        &[
            (&[], true),
            (&[("k", "Binary", "x")], true),
            (&[("k", "String", "v")], true),
        ],
    );
}
