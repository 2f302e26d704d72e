//! The `attributes` scope's input: message attributes by name, each a data type and a
//! string value as SNS carries them, and how an attribute becomes the scalars conditions see.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

use crate::condition::Scalar;

/// One message attribute as SNS carries it: `data_type` is `String`, `Number`,
/// `String.Array` or `Binary`, optionally with a custom suffix (`Number.int`, `String.foo`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttributeValue {
    /// The attribute's data type.
    pub data_type: String,
    /// The attribute's value as text (a JSON array for `String.Array`).
    pub value: String,
}

impl AttributeValue {
    /// An attribute of type `data_type` with `value`.
    pub fn new(data_type: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            data_type: data_type.into(),
            value: value.into(),
        }
    }
}

/// A borrowed view of one attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttributeRef<'a> {
    /// The attribute's data type.
    pub data_type: &'a str,
    /// The attribute's value as text.
    pub value: &'a str,
}

/// Anything that can look message attributes up by name, so callers need not convert their
/// own attribute maps.
pub trait MessageAttributes {
    /// The attribute called `name`, if the message has one.
    fn attribute(&self, name: &str) -> Option<AttributeRef<'_>>;
}

impl MessageAttributes for BTreeMap<String, AttributeValue> {
    fn attribute(&self, name: &str) -> Option<AttributeRef<'_>> {
        self.get(name).map(AttributeValue::as_ref)
    }
}

impl<S: BuildHasher> MessageAttributes for HashMap<String, AttributeValue, S> {
    fn attribute(&self, name: &str) -> Option<AttributeRef<'_>> {
        self.get(name).map(AttributeValue::as_ref)
    }
}

impl AttributeValue {
    fn as_ref(&self) -> AttributeRef<'_> {
        AttributeRef {
            data_type: &self.data_type,
            value: &self.value,
        }
    }
}

/// How a data type is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    String,
    Number,
    StringArray,
}

impl Kind {
    /// `None` for `Binary` and unknown types, which SNS ignores: they count as absent.
    pub(crate) fn of(data_type: &str) -> Option<Self> {
        let base = data_type.split('.').next().unwrap_or(data_type);
        match base {
            "String" if data_type == "String.Array" => Some(Self::StringArray),
            "String" => Some(Self::String),
            "Number" => Some(Self::Number),
            _ => None,
        }
    }
}

/// Calls `on_scalar` with each scalar the attribute holds until it returns true; returns
/// whether it did. A `Number` that does not parse as a finite number and a `String.Array`
/// that is not a JSON array hold no scalars (but are still present for `exists`).
pub(crate) fn any_scalar(
    kind: Kind,
    value: &str,
    mut on_scalar: impl FnMut(Scalar<'_>) -> bool,
) -> bool {
    match kind {
        Kind::String => on_scalar(Scalar::Str(value)),
        Kind::Number => match value.trim().parse::<f64>() {
            Ok(number) if number.is_finite() => on_scalar(Scalar::Num(number)),
            _ => false,
        },
        Kind::StringArray => match serde_json::from_str::<Vec<serde_json::Value>>(value) {
            Ok(elements) => elements.iter().filter_map(Scalar::from_json).any(on_scalar),
            Err(_) => false,
        },
    }
}
