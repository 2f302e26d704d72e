//! Validation and compilation: turns a policy's JSON into its keys (each held once), one
//! rule per leaf and the `$or` tree combining them, enforcing SNS's structure rules, operand
//! rules and limits on the way. Nothing is multiplied out, so the compiled form is as large
//! as the policy whatever its `$or`s (see the crate docs' bound).
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

/// One object key of the policy, held once however many alternatives use it: a nested key
/// names its parent, so a rule's path is the chain of its keys and no alternative copies it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KeyNode {
    pub(crate) name: Box<str>,
    pub(crate) parent: Option<u32>,
}

/// One leaf of the policy (a key with its list of conditions): the message value at the
/// key's path must satisfy at least one condition. Every leaf is one rule, used by every
/// alternative it belongs to by index.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rule {
    /// The leaf's key in [`Compiled::keys`].
    pub(crate) key: u32,
    /// Nesting depth of the key (1 at the top level), for the combination count.
    depth: u32,
    pub(crate) conditions: Vec<Condition>,
}

/// The policy's logic as written: every term must hold; an `$or` holds when every term of
/// one of its branches does. Nested objects add no term of their own (their rules join their
/// parent's list), so the tree is as large as the policy and `$or` is never multiplied out.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Term {
    Rule(u32),
    Or(Vec<Vec<Term>>),
}

/// A validated policy: its keys, its rules and the terms combining them.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Compiled {
    pub(crate) keys: Vec<KeyNode>,
    pub(crate) rules: Vec<Rule>,
    pub(crate) terms: Vec<Term>,
}

/// How many distinct top-level keys of one alternative are counted before counting stops:
/// well above [`MAX_KEYS`], so an error states the real count of any plausible policy, while
/// a policy of thousands of keys costs no more to refuse than one of 64 (a full set takes
/// no more names without comparing).
pub(crate) const KEY_COUNT_CAP: usize = 64;

/// Validates `policy` and compiles it. `text_size` is the size of the text it was parsed
/// from, already checked; without it the value's compact JSON is measured.
pub(crate) fn compile(
    policy: &Value,
    scope: FilterScope,
    text_size: Option<usize>,
) -> Result<Compiled, PolicyError> {
    let Value::Object(map) = policy else {
        return Err(PolicyError::NotAnObject);
    };
    let mut compiled = Compiled::default();
    compiled.terms = build_object(map, scope, 0, None, &mut compiled)?;
    if text_size.is_none() {
        // Every level is bounded by MAX_POLICY_DEPTH by now, so serialising cannot recurse
        // deeply.
        let size = serde_json::to_vec(policy).map_or(usize::MAX, |bytes| bytes.len());
        check_size(size)?;
    }
    let combinations = count_combinations(&compiled.rules, &compiled.terms);
    if combinations > MAX_COMBINATIONS {
        return Err(PolicyError::TooComplex { combinations });
    }
    // At most MAX_COMBINATIONS alternatives now (each adds at least one combination).
    let count = top_key_sets(&compiled, &compiled.terms)
        .iter()
        .map(Vec::len)
        .max()
        .unwrap_or(0);
    if count > MAX_KEYS {
        return Err(PolicyError::TooManyKeys { count });
    }
    // Kept for as long as the subscription: no room left over from growing.
    compiled.keys.shrink_to_fit();
    compiled.rules.shrink_to_fit();
    shrink_terms(&mut compiled.terms);
    Ok(compiled)
}

pub(crate) fn check_size(size: usize) -> Result<(), PolicyError> {
    if size > MAX_POLICY_BYTES {
        return Err(PolicyError::TooLarge { size });
    }
    Ok(())
}

/// Compiles one object's entries into terms; `parent` is the key the object is the value of.
fn build_object(
    map: &Map<String, Value>,
    scope: FilterScope,
    nesting: usize,
    parent: Option<u32>,
    out: &mut Compiled,
) -> Result<Vec<Term>, PolicyError> {
    if nesting > MAX_POLICY_DEPTH {
        return Err(PolicyError::TooDeep);
    }
    let depth = out.key_depth(parent) + 1;
    let mut terms = Vec::with_capacity(map.len());
    for (key, value) in map {
        if key == "$or" {
            terms.push(Term::Or(build_or(value, scope, nesting, parent, out)?));
            continue;
        }
        match value {
            Value::Array(items) => {
                if items.is_empty() {
                    return Err(PolicyError::EmptyArray { key: key.clone() });
                }
                let conditions = items
                    .iter()
                    .map(|item| parse_condition(key, item))
                    .collect::<Result<Vec<_>, _>>()?;
                let key = out.push_key(key, parent);
                terms.push(Term::Rule(out.rules.len() as u32));
                out.rules.push(Rule {
                    key,
                    depth,
                    conditions,
                });
            }
            Value::Object(inner) => {
                if inner.is_empty() {
                    return Err(PolicyError::EmptyObject { key: key.clone() });
                }
                // The children are checked first, so a misplaced operator such as
                // `{"key": {"suffix": "x"}}` is reported as such, as SNS does.
                let node = out.push_key(key, parent);
                let inner_terms = build_object(inner, scope, nesting + 1, Some(node), out)?;
                if scope == FilterScope::Attributes {
                    return Err(PolicyError::NestedInAttributesScope { key: key.clone() });
                }
                terms.extend(inner_terms);
            }
            _ => return Err(PolicyError::MustBeObjectOrArray { key: key.clone() }),
        }
    }
    Ok(terms)
}

fn build_or(
    value: &Value,
    scope: FilterScope,
    nesting: usize,
    parent: Option<u32>,
    out: &mut Compiled,
) -> Result<Vec<Vec<Term>>, PolicyError> {
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
            Value::Object(inner) => build_object(inner, scope, nesting + 1, parent, out),
            _ => Err(PolicyError::InvalidOr),
        })
        .collect()
}

impl Compiled {
    fn push_key(&mut self, name: &str, parent: Option<u32>) -> u32 {
        self.keys.push(KeyNode {
            name: name.into(),
            parent,
        });
        (self.keys.len() - 1) as u32
    }

    /// How many keys lead to `key`, itself included (0 for none: the top level's parent).
    fn key_depth(&self, mut key: Option<u32>) -> u32 {
        let mut depth = 0;
        while let Some(node) = key.and_then(|k| self.keys.get(k as usize)) {
            depth += 1;
            key = node.parent;
        }
        depth
    }

    /// The key with no parent that `key` is under (itself if it has none).
    pub(crate) fn top_key(&self, key: u32) -> Option<&KeyNode> {
        let mut node = self.keys.get(key as usize)?;
        while let Some(parent) = node.parent.and_then(|p| self.keys.get(p as usize)) {
            node = parent;
        }
        Some(node)
    }

    /// A rule's path as SNS writes it: its keys joined with `.`.
    pub(crate) fn path(&self, rule: &Rule) -> String {
        let mut names = Vec::new();
        let mut key = Some(rule.key);
        while let Some(node) = key.and_then(|k| self.keys.get(k as usize)) {
            names.push(&*node.name);
            key = node.parent;
        }
        names.reverse();
        names.join(".")
    }

    /// The policy multiplied out into alternatives of rule indices, in the policy's order
    /// (for explanations only: matching walks the terms). A validated policy has at most
    /// [`MAX_COMBINATIONS`] alternatives.
    pub(crate) fn alternatives(terms: &[Term]) -> Vec<Vec<u32>> {
        let mut alternatives: Vec<Vec<u32>> = vec![Vec::new()];
        for term in terms {
            match term {
                Term::Rule(rule) => {
                    for alternative in &mut alternatives {
                        alternative.push(*rule);
                    }
                }
                Term::Or(branches) => {
                    let inner: Vec<Vec<u32>> = branches
                        .iter()
                        .flat_map(|branch| Self::alternatives(branch))
                        .collect();
                    alternatives = cross(&alternatives, &inner, |head, tail| {
                        head.extend_from_slice(tail)
                    });
                }
            }
        }
        alternatives
    }
}

fn shrink_terms(terms: &mut Vec<Term>) {
    terms.shrink_to_fit();
    for term in terms {
        if let Term::Or(branches) = term {
            branches.shrink_to_fit();
            branches.iter_mut().for_each(shrink_terms);
        }
    }
}

/// The distinct top-level key names of each alternative (each set stops growing at
/// [`KEY_COUNT_CAP`]).
fn top_key_sets<'a>(compiled: &'a Compiled, terms: &[Term]) -> Vec<Vec<&'a str>> {
    let add = |set: &mut Vec<&'a str>, name: &'a str| {
        if set.len() < KEY_COUNT_CAP && !set.contains(&name) {
            set.push(name);
        }
    };
    let mut sets: Vec<Vec<&str>> = vec![Vec::new()];
    for term in terms {
        match term {
            Term::Rule(rule) => {
                let Some(top) = compiled
                    .rules
                    .get(*rule as usize)
                    .and_then(|rule| compiled.top_key(rule.key))
                else {
                    continue;
                };
                for set in &mut sets {
                    add(set, &top.name);
                }
            }
            Term::Or(branches) => {
                let inner: Vec<Vec<&str>> = branches
                    .iter()
                    .flat_map(|branch| top_key_sets(compiled, branch))
                    .collect();
                sets = cross(&sets, &inner, |head, tail| {
                    for name in tail {
                        add(head, name);
                    }
                });
            }
        }
    }
    sets
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
fn count_combinations(rules: &[Rule], terms: &[Term]) -> u64 {
    terms.iter().fold(1u64, |total, term| {
        let factor = match term {
            Term::Rule(rule) => rules.get(*rule as usize).map_or(1, |rule| {
                (rule.conditions.len() as u64).saturating_mul(u64::from(rule.depth))
            }),
            Term::Or(branches) => branches.iter().fold(0u64, |sum, branch| {
                sum.saturating_add(count_combinations(rules, branch))
            }),
        };
        total.saturating_mul(factor)
    })
}

/// Every pairing of an alternative of `left` with one of `right`, left-major, joined by
/// `join` (which appends the right one to a copy of the left one).
fn cross<T: Clone>(left: &[T], right: &[T], join: impl Fn(&mut T, &T)) -> Vec<T> {
    let mut product = Vec::with_capacity(left.len().saturating_mul(right.len()));
    for head in left {
        for tail in right {
            let mut alternative = head.clone();
            join(&mut alternative, tail);
            product.push(alternative);
        }
    }
    product
}
