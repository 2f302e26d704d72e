//! The `body` scope's lookup: finds the leaves of a JSON body at a policy path. Arrays are
//! transparent (any element, at any depth of array nesting), and a `.` in a path may be a
//! level of nesting or part of a key, as in SNS (`a.b` finds both `{"a":{"b":…}}` and
//! `{"a.b":…}`).

use serde_json::{Map, Value};

/// Calls `on_leaf` with every scalar at `path` in `object` until it returns true; returns
/// whether it did. Objects are not leaves, and empty arrays hold none.
pub(crate) fn any_leaf<'a>(
    object: &'a Map<String, Value>,
    path: &str,
    on_leaf: &mut dyn FnMut(&'a Value) -> bool,
) -> bool {
    if let Some(value) = object.get(path) {
        if visit(value, "", on_leaf) {
            return true;
        }
    }
    for (dot, _) in path.match_indices('.') {
        let (Some(head), Some(tail)) = (path.get(..dot), path.get(dot + 1..)) else {
            continue;
        };
        if let Some(value) = object.get(head) {
            if visit(value, tail, on_leaf) {
                return true;
            }
        }
    }
    false
}

fn visit<'a>(value: &'a Value, rest: &str, on_leaf: &mut dyn FnMut(&'a Value) -> bool) -> bool {
    match value {
        Value::Array(items) => items.iter().any(|item| visit(item, rest, on_leaf)),
        Value::Object(object) => !rest.is_empty() && any_leaf(object, rest, on_leaf),
        scalar => rest.is_empty() && on_leaf(scalar),
    }
}
