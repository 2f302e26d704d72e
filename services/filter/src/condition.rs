//! One compiled condition (an element of a key's list in the policy) and how it judges one
//! scalar taken from a message. Numbers on both sides are compared after rounding to SNS's
//! five decimal places.

use crate::cidr::Cidr;

/// A scalar from a message, borrowed so matching does not copy message text.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scalar<'a> {
    Str(&'a str),
    Num(f64),
    Bool(bool),
    Null,
}

impl<'a> Scalar<'a> {
    /// The scalar a JSON leaf stands for; arrays and objects are not scalars.
    pub(crate) fn from_json(value: &'a serde_json::Value) -> Option<Self> {
        match value {
            serde_json::Value::String(text) => Some(Self::Str(text)),
            serde_json::Value::Number(number) => number.as_f64().map(Self::Num),
            serde_json::Value::Bool(flag) => Some(Self::Bool(*flag)),
            serde_json::Value::Null => Some(Self::Null),
            serde_json::Value::Array(_) | serde_json::Value::Object(_) => None,
        }
    }
}

/// Rounds to SNS's numeric precision (five decimal places), so equal results mean "equal to
/// five decimals". Rounding is monotonic, so ranges compare the same way. Beyond 1e15 an f64
/// has no fractional digits left to round (and scaling could overflow), so it is kept as is.
pub(crate) fn quantise(number: f64) -> f64 {
    if number.abs() < 1e15 {
        (number * 100_000.0).round() / 100_000.0
    } else {
        number
    }
}

/// One end of a numeric range, already quantised.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Bound {
    pub(crate) value: f64,
    pub(crate) inclusive: bool,
}

/// A `numeric` condition: `=` is a range whose ends are equal and inclusive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct NumericRange {
    pub(crate) lower: Option<Bound>,
    pub(crate) upper: Option<Bound>,
}

impl NumericRange {
    fn contains(&self, quantised: f64) -> bool {
        let above_lower = self.lower.is_none_or(|bound| {
            quantised > bound.value || (bound.inclusive && quantised == bound.value)
        });
        let below_upper = self.upper.is_none_or(|bound| {
            quantised < bound.value || (bound.inclusive && quantised == bound.value)
        });
        above_lower && below_upper
    }
}

/// What `anything-but` excludes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Excluded {
    /// Exact strings and (quantised) numbers.
    Values {
        strings: Vec<String>,
        numbers: Vec<f64>,
    },
    /// Strings starting with this prefix.
    Prefix(String),
}

/// One compiled condition.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Condition {
    ExactString(String),
    /// Quantised.
    ExactNumber(f64),
    Bool(bool),
    Null,
    Prefix(String),
    Suffix(String),
    EqualsIgnoreCase(String),
    AnythingBut(Excluded),
    Numeric(NumericRange),
    Cidr(Cidr),
    /// Judged on the key's presence, never on a value.
    Exists(bool),
}

impl Condition {
    /// Bytes this condition holds on the heap (its strings and lists).
    pub(crate) fn heap_size(&self) -> usize {
        match self {
            Self::ExactString(text)
            | Self::Prefix(text)
            | Self::Suffix(text)
            | Self::EqualsIgnoreCase(text)
            | Self::AnythingBut(Excluded::Prefix(text)) => text.capacity(),
            Self::AnythingBut(Excluded::Values { strings, numbers }) => {
                strings.capacity() * std::mem::size_of::<String>()
                    + strings.iter().map(String::capacity).sum::<usize>()
                    + numbers.capacity() * std::mem::size_of::<f64>()
            }
            Self::ExactNumber(_)
            | Self::Bool(_)
            | Self::Null
            | Self::Numeric(_)
            | Self::Cidr(_)
            | Self::Exists(_) => 0,
        }
    }

    /// Whether this condition accepts `scalar`. `exists` accepts no value: it is decided by
    /// presence alone (see [`crate::policy`]).
    pub(crate) fn accepts(&self, scalar: Scalar<'_>) -> bool {
        match (self, scalar) {
            (Self::ExactString(expected), Scalar::Str(text)) => expected == text,
            (Self::ExactNumber(expected), Scalar::Num(number)) => *expected == quantise(number),
            (Self::Bool(expected), Scalar::Bool(flag)) => *expected == flag,
            (Self::Null, Scalar::Null) => true,
            (Self::Prefix(prefix), Scalar::Str(text)) => text.starts_with(prefix.as_str()),
            (Self::Suffix(suffix), Scalar::Str(text)) => text.ends_with(suffix.as_str()),
            (Self::EqualsIgnoreCase(expected), Scalar::Str(text)) => {
                equals_ignore_case(expected, text)
            }
            (Self::AnythingBut(_), Scalar::Null) => false,
            (Self::AnythingBut(Excluded::Values { strings, .. }), Scalar::Str(text)) => {
                !strings.iter().any(|excluded| excluded == text)
            }
            (Self::AnythingBut(Excluded::Values { numbers, .. }), Scalar::Num(number)) => {
                let quantised = quantise(number);
                !numbers.contains(&quantised)
            }
            (Self::AnythingBut(Excluded::Prefix(prefix)), Scalar::Str(text)) => {
                !text.starts_with(prefix.as_str())
            }
            (Self::AnythingBut(_), Scalar::Num(_) | Scalar::Bool(_)) => true,
            (Self::Numeric(range), Scalar::Num(number)) => range.contains(quantise(number)),
            (Self::Cidr(network), Scalar::Str(text)) => network.contains(text),
            _ => false,
        }
    }
}

/// Unicode case-insensitive equality without allocating: both sides are compared as
/// streams of lowercase characters.
fn equals_ignore_case(left: &str, right: &str) -> bool {
    if left.is_ascii() && right.is_ascii() {
        return left.eq_ignore_ascii_case(right);
    }
    left.chars()
        .flat_map(char::to_lowercase)
        .eq(right.chars().flat_map(char::to_lowercase))
}
