//! Validation and compilation: turns a policy's JSON into `$or`-free alternatives of flat
//! key rules, enforcing SNS's structure rules, operand rules and limits on the way.
//!
//! Order of checks (the first failure is reported): structure and every condition while
//! walking the policy, then the size, then the combination count, then the key count.

use serde_json::{Map, Value};

use crate::cidr::Cidr;
use crate::condition::{quantise, Bound, Condition, Excluded, NumericRange};
use crate::error::PolicyError;
use crate::{FilterScope, MAX_COMBINATIONS, MAX_KEYS, MAX_POLICY_BYTES, MAX_POLICY_DEPTH};

/// SNS's numeric range: operands of `numeric` must lie within ±1e9.
const NUMERIC_LIMIT: f64 = 1_000_000_000.0;

/// One key of one alternative: the message value at `path` must satisfy at least one
/// condition. `path` joins nested body keys with `.`, as SNS does.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KeyRule {
    pub(crate) path: String,
    /// Length of the top-level key at the start of `path`, for the key limit.
    top_key_len: usize,
    pub(crate) conditions: Vec<Condition>,
}

/// Every rule must hold for the alternative to match.
pub(crate) type Alternative = Vec<KeyRule>;

/// The policy as written, with conditions compiled, before `$or` is multiplied out.
enum Entry {
    Leaf {
        key: String,
        conditions: Vec<Condition>,
    },
    Nested {
        key: String,
        entries: Vec<Entry>,
    },
    Or(Vec<Vec<Entry>>),
}

/// Validates `policy` and compiles it into alternatives (any one matching suffices).
/// `text_size` is the size of the text it was parsed from, already checked; without it the
/// value's compact JSON is measured.
pub(crate) fn compile(
    policy: &Value,
    scope: FilterScope,
    text_size: Option<usize>,
) -> Result<Vec<Alternative>, PolicyError> {
    let Value::Object(map) = policy else {
        return Err(PolicyError::NotAnObject);
    };
    let entries = build_object(map, scope, 0)?;
    if text_size.is_none() {
        // Every level is bounded by MAX_POLICY_DEPTH by now, so serialising cannot recurse
        // deeply.
        let size = serde_json::to_vec(policy).map_or(usize::MAX, |bytes| bytes.len());
        check_size(size)?;
    }
    let combinations = count_combinations(&entries, 1);
    if combinations > MAX_COMBINATIONS {
        return Err(PolicyError::TooComplex { combinations });
    }
    let alternatives = expand(&entries, "", None);
    let count = alternatives
        .iter()
        .map(|alternative| distinct_top_keys(alternative))
        .max()
        .unwrap_or(0);
    if count > MAX_KEYS {
        return Err(PolicyError::TooManyKeys { count });
    }
    Ok(alternatives)
}

pub(crate) fn check_size(size: usize) -> Result<(), PolicyError> {
    if size > MAX_POLICY_BYTES {
        return Err(PolicyError::TooLarge { size });
    }
    Ok(())
}

fn build_object(
    map: &Map<String, Value>,
    scope: FilterScope,
    nesting: usize,
) -> Result<Vec<Entry>, PolicyError> {
    if nesting > MAX_POLICY_DEPTH {
        return Err(PolicyError::TooDeep);
    }
    let mut entries = Vec::with_capacity(map.len());
    for (key, value) in map {
        if key == "$or" {
            entries.push(Entry::Or(build_or(value, scope, nesting)?));
            continue;
        }
        let entry = match value {
            Value::Array(items) => {
                if items.is_empty() {
                    return Err(PolicyError::EmptyArray { key: key.clone() });
                }
                let conditions = items
                    .iter()
                    .map(|item| parse_condition(key, item))
                    .collect::<Result<Vec<_>, _>>()?;
                Entry::Leaf {
                    key: key.clone(),
                    conditions,
                }
            }
            Value::Object(inner) => {
                if inner.is_empty() {
                    return Err(PolicyError::EmptyObject { key: key.clone() });
                }
                // The children are checked first, so a misplaced operator such as
                // `{"key": {"suffix": "x"}}` is reported as such, as SNS does.
                let entries = build_object(inner, scope, nesting + 1)?;
                if scope == FilterScope::Attributes {
                    return Err(PolicyError::NestedInAttributesScope { key: key.clone() });
                }
                Entry::Nested {
                    key: key.clone(),
                    entries,
                }
            }
            _ => return Err(PolicyError::MustBeObjectOrArray { key: key.clone() }),
        };
        entries.push(entry);
    }
    Ok(entries)
}

fn build_or(
    value: &Value,
    scope: FilterScope,
    nesting: usize,
) -> Result<Vec<Vec<Entry>>, PolicyError> {
    let Value::Array(branches) = value else {
        return Err(PolicyError::InvalidOr);
    };
    if branches.len() < 2 {
        return Err(PolicyError::InvalidOr);
    }
    branches
        .iter()
        .map(|branch| match branch {
            Value::Object(inner) if inner.is_empty() => Err(PolicyError::EmptyObject {
                key: "$or".to_owned(),
            }),
            Value::Object(inner) => build_object(inner, scope, nesting + 1),
            _ => Err(PolicyError::InvalidOr),
        })
        .collect()
}

fn parse_condition(key: &str, item: &Value) -> Result<Condition, PolicyError> {
    match item {
        Value::String(text) => Ok(Condition::ExactString(text.clone())),
        Value::Number(number) => Ok(Condition::ExactNumber(quantise(as_f64(number)))),
        Value::Bool(flag) => Ok(Condition::Bool(*flag)),
        Value::Null => Ok(Condition::Null),
        Value::Array(_) => Err(PolicyError::BadMatchValue {
            key: key.to_owned(),
        }),
        Value::Object(operator) => {
            let mut pairs = operator.iter();
            let (Some((name, operand)), None) = (pairs.next(), pairs.next()) else {
                return Err(PolicyError::OnlyOneKey {
                    key: key.to_owned(),
                });
            };
            parse_operator(key, name, operand)
        }
    }
}

fn parse_operator(key: &str, name: &str, operand: &Value) -> Result<Condition, PolicyError> {
    match name {
        "prefix" => string_operand("prefix", operand).map(Condition::Prefix),
        "suffix" => string_operand("suffix", operand).map(Condition::Suffix),
        "equals-ignore-case" => {
            string_operand("equals-ignore-case", operand).map(Condition::EqualsIgnoreCase)
        }
        "anything-but" => parse_anything_but(key, operand).map(Condition::AnythingBut),
        "exists" => match operand {
            Value::Bool(flag) => Ok(Condition::Exists(*flag)),
            _ => Err(PolicyError::ExistsMustBeBool),
        },
        "numeric" => parse_numeric(operand).map(Condition::Numeric),
        "cidr" => Cidr::parse(&string_operand("cidr", operand)?).map(Condition::Cidr),
        other => Err(PolicyError::UnrecognizedMatchType {
            operator: other.to_owned(),
        }),
    }
}

fn string_operand(operator: &'static str, operand: &Value) -> Result<String, PolicyError> {
    match operand {
        Value::String(text) => Ok(text.clone()),
        _ => Err(PolicyError::PatternMustBeString { operator }),
    }
}

fn parse_anything_but(key: &str, operand: &Value) -> Result<Excluded, PolicyError> {
    let mut strings = Vec::new();
    let mut numbers = Vec::new();
    let mut add = |value: &Value| match value {
        Value::String(text) => {
            strings.push(text.clone());
            Ok(())
        }
        Value::Number(number) => {
            numbers.push(quantise(as_f64(number)));
            Ok(())
        }
        _ => Err(PolicyError::AnythingButValue),
    };
    match operand {
        Value::Object(inner) => {
            let mut pairs = inner.iter();
            let (Some((name, prefix)), None) = (pairs.next(), pairs.next()) else {
                return Err(PolicyError::OnlyOneKey {
                    key: key.to_owned(),
                });
            };
            if name != "prefix" {
                return Err(PolicyError::UnsupportedAnythingBut {
                    operator: name.clone(),
                });
            }
            return string_operand("prefix", prefix).map(Excluded::Prefix);
        }
        Value::Array(items) => {
            if items.is_empty() {
                return Err(PolicyError::EmptyArray {
                    key: key.to_owned(),
                });
            }
            items.iter().try_for_each(&mut add)?;
        }
        single => add(single)?,
    }
    Ok(Excluded::Values { strings, numbers })
}

/// Follows SNS's grammar: `[op, n]` with op one of `= < <= > >=`, or
/// `[> or >=, low, < or <=, high]` with low < high; each fault has SNS's message.
fn parse_numeric(operand: &Value) -> Result<NumericRange, PolicyError> {
    let Value::Array(items) = operand else {
        return Err(PolicyError::NumericMustBeArray);
    };
    let mut items = items.iter();
    let first_operator = match items.next() {
        None => {
            return Err(PolicyError::InvalidNumericMember {
                member: "]".to_owned(),
            })
        }
        Some(Value::String(operator)) => operator.as_str(),
        Some(other) => {
            return Err(PolicyError::InvalidNumericMember {
                member: describe(other),
            })
        }
    };
    if !matches!(first_operator, "=" | "<" | "<=" | ">" | ">=") {
        return Err(PolicyError::UnrecognizedNumericOperator {
            operator: first_operator.to_owned(),
        });
    }
    let first_value = numeric_operand(first_operator, items.next())?;
    let bound = |value: f64, inclusive: bool| Some(Bound { value, inclusive });
    let mut range = match first_operator {
        "=" => NumericRange {
            lower: bound(first_value, true),
            upper: bound(first_value, true),
        },
        "<" | "<=" => NumericRange {
            lower: None,
            upper: bound(first_value, first_operator == "<="),
        },
        _ => NumericRange {
            lower: bound(first_value, first_operator == ">="),
            upper: None,
        },
    };
    let Some(second) = items.next() else {
        return Ok(range);
    };
    if range.upper.is_some() {
        return Err(PolicyError::TooManyNumericElements);
    }
    let second_operator = match second {
        Value::String(operator) => operator.as_str(),
        other => {
            return Err(PolicyError::BadNumericRangeValue {
                value: describe(other),
            })
        }
    };
    if !matches!(second_operator, "<" | "<=") {
        return Err(PolicyError::BadNumericRangeOperator {
            operator: second_operator.to_owned(),
        });
    }
    let second_value = numeric_operand(second_operator, items.next())?;
    if second_value <= first_value {
        return Err(PolicyError::BottomNotLessThanTop);
    }
    if items.next().is_some() {
        return Err(PolicyError::TooManyNumericTerms);
    }
    range.upper = bound(second_value, second_operator == "<=");
    Ok(range)
}

/// The quantised number after `operator`, within SNS's range.
fn numeric_operand(operator: &str, value: Option<&Value>) -> Result<f64, PolicyError> {
    let Some(Value::Number(number)) = value else {
        let operator = if operator == "=" { "equals" } else { operator };
        return Err(PolicyError::NumericValueNotNumeric {
            operator: operator.to_owned(),
        });
    };
    let value = as_f64(number);
    if !(-NUMERIC_LIMIT..=NUMERIC_LIMIT).contains(&value) {
        return Err(PolicyError::NumericOutOfRange {
            value: number.to_string(),
        });
    }
    Ok(quantise(value))
}

/// serde_json numbers always have an f64 view unless `arbitrary_precision` is on; NaN keeps
/// such a number from ever comparing equal.
fn as_f64(number: &serde_json::Number) -> f64 {
    number.as_f64().unwrap_or(f64::NAN)
}

fn describe(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// SNS's count: each list of values counts its length times its nesting depth, keys
/// multiply, and `$or` branches add up (so the total is the sum over alternatives).
fn count_combinations(entries: &[Entry], depth: u64) -> u64 {
    entries.iter().fold(1u64, |total, entry| {
        let factor = match entry {
            Entry::Leaf { conditions, .. } => (conditions.len() as u64).saturating_mul(depth),
            Entry::Nested { entries, .. } => count_combinations(entries, depth.saturating_add(1)),
            Entry::Or(branches) => branches.iter().fold(0u64, |sum, branch| {
                sum.saturating_add(count_combinations(branch, depth))
            }),
        };
        total.saturating_mul(factor)
    })
}

/// Multiplies `$or` out. `top_key_len` is `None` at the top level, where each key starts a
/// new top-level key.
fn expand(entries: &[Entry], prefix: &str, top_key_len: Option<usize>) -> Vec<Alternative> {
    let mut alternatives: Vec<Alternative> = vec![Vec::new()];
    for entry in entries {
        match entry {
            Entry::Leaf { key, conditions } => {
                let path = join(prefix, key);
                let top_key_len = top_key_len.unwrap_or(key.len());
                for alternative in &mut alternatives {
                    alternative.push(KeyRule {
                        path: path.clone(),
                        top_key_len,
                        conditions: conditions.clone(),
                    });
                }
            }
            Entry::Nested { key, entries } => {
                let path = join(prefix, key);
                let inner = expand(entries, &path, Some(top_key_len.unwrap_or(key.len())));
                alternatives = cross(&alternatives, &inner);
            }
            Entry::Or(branches) => {
                let inner: Vec<Alternative> = branches
                    .iter()
                    .flat_map(|branch| expand(branch, prefix, top_key_len))
                    .collect();
                alternatives = cross(&alternatives, &inner);
            }
        }
    }
    alternatives
}

fn cross(left: &[Alternative], right: &[Alternative]) -> Vec<Alternative> {
    let mut product = Vec::with_capacity(left.len().saturating_mul(right.len()));
    for head in left {
        for tail in right {
            let mut alternative = head.clone();
            alternative.extend(tail.iter().cloned());
            product.push(alternative);
        }
    }
    product
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

fn distinct_top_keys(alternative: &[KeyRule]) -> usize {
    let mut seen: Vec<&str> = Vec::new();
    for rule in alternative {
        let top = rule.path.get(..rule.top_key_len).unwrap_or(&rule.path);
        if !seen.contains(&top) {
            seen.push(top);
        }
    }
    seen.len()
}
