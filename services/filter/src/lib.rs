//! The SNS filter-policy language, as a pure library: [`FilterPolicy::parse`] validates a
//! policy once (at subscribe time) with SNS's rules and limits and compiles it; the compiled
//! policy then matches many messages without re-parsing, never panics on any input, and can
//! explain a mismatch ([`Mismatch`]) for the dashboard's policy tester.
//!
//! ```
//! use std::collections::BTreeMap;
//! use sluice_filter::{AttributeValue, FilterPolicy, FilterScope};
//!
//! let policy = FilterPolicy::parse(
//!     r#"{"store": ["example_corp"], "price": [{"numeric": [">=", 0, "<", 150]}]}"#,
//!     FilterScope::Attributes,
//! )?;
//! let message = BTreeMap::from([
//!     ("store".to_owned(), AttributeValue::new("String", "example_corp")),
//!     ("price".to_owned(), AttributeValue::new("Number", "99.5")),
//! ]);
//! assert!(policy.matches_attributes(&message));
//!
//! let body_policy = FilterPolicy::parse(r#"{"order": {"kind": [{"prefix": "gift"}]}}"#, FilterScope::Body)?;
//! assert!(body_policy.matches_body(r#"{"order": {"kind": "gift-card"}}"#));
//! let why = body_policy.explain_body(r#"{"order": {}}"#).unwrap_err();
//! assert_eq!(why.to_string(), r#"key "order.kind" is missing"#);
//!
//! let error = FilterPolicy::parse(r#"{"store": "example_corp"}"#, FilterScope::Attributes).unwrap_err();
//! assert!(error.to_string().starts_with("filter_policy: "));
//! # Ok::<(), sluice_filter::PolicyError>(())
//! ```
//!
//! Modules: `parse` (validation, limits, compilation into keys, rules and the `$or` tree),
//! `condition` (one compiled condition judging one scalar), `cidr` (IP networks),
//! `attributes` (the attribute input types), `body` (the trie of rule paths and the one walk
//! of a JSON body), `mismatch` (explanations), `error` ([`PolicyError`]).
//!
//! # Cost and size
//!
//! A compiled policy holds each key, string and condition of its source once: a rule (one per
//! leaf of the policy) names its key, a nested key its parent, `$or` stays a tree of rule
//! indices (never multiplied out), and the body scope's trie of paths holds each byte of the
//! keys at most once. So [`FilterPolicy::heap_size`] is at most a constant times the source's
//! size, whatever `$or` or the dots in keys multiply: about 2 bytes per byte of key or string
//! (the key table and the trie) plus a few hundred bytes per key and per condition, which
//! [`MAX_COMBINATIONS`] keeps to a few hundred. `tests/table/cost.rs` checks at most 48 × the
//! JSON text plus 4 KiB (the worst case is many one-character keys; long keys and strings
//! cost under 3 × their text: a 200 KB key beside an `$or` of 149 branches, ~30 MB when
//! `$or` was multiplied out, compiles to about 0.4 MB).
//!
//! Matching attributes judges each rule at most once (one lookup each). Matching a body walks
//! it once for all rules: each body key is compared with the trie at most once and each body
//! node is visited at most once, then each scalar found at a rule's path is judged by that
//! path's rules. The cost is at most the body's size plus, per such scalar, the conditions of
//! the rules at its path — which [`MAX_COMBINATIONS`] bounds — plus the policy's size (the
//! tree). Explanations multiply `$or` out, into at most [`MAX_COMBINATIONS`] alternatives.
//!
//! # The language
//!
//! A policy is a JSON object. Each key maps to a list of conditions, at least one of which
//! must hold (OR); all keys must hold (AND). `"$or": [{…}, {…}, …]` (two or more objects)
//! makes alternatives. Conditions: exact strings, numbers, `true`/`false`, `null`;
//! `{"prefix": s}`, `{"suffix": s}`, `{"equals-ignore-case": s}`; `{"anything-but": v}`
//! with `v` a string, a number, a list of those, or `{"prefix": s}`; `{"numeric": [op, n]}`
//! or `{"numeric": [">"|">=", low, "<"|"<=", high]}`; `{"exists": bool}`;
//! `{"cidr": "addr/bits"}` (IPv4 or IPv6).
//!
//! * **Scopes.** [`FilterScope::Attributes`]: flat keys only, matched against message
//!   attributes. [`FilterScope::Body`]: the body must be a JSON object; nested policy
//!   objects follow its structure (a `.` in a policy key may also stand for a level, as in
//!   SNS); arrays in the body match if any element matches; a body that is not a JSON
//!   object matches no policy, not even `{}`.
//! * **Types.** String conditions (exact string, `prefix`, `suffix`, `equals-ignore-case`,
//!   `cidr`) see only strings; number conditions (exact number, `numeric`) see only numbers,
//!   compared as numbers rounded to five decimal places (so `3.015e2` equals `301.5`).
//!   Attribute types: `String…` is a string, `Number…` a number (text that is not a finite
//!   number holds no value), `String.Array` a JSON array whose scalar elements are matched
//!   one by one. `Binary` (and unknown types) are ignored by SNS and so count as absent.
//! * **Absence.** A key absent from the message fails every condition except
//!   `{"exists": false}`. `null` and `false` are present values; an empty array or an object
//!   where a leaf is expected is absent.
//! * **`anything-but`** matches a present, non-null value that is not excluded: a string not
//!   in the list (or not starting with the prefix), a number not in the list, or any boolean.
//!   Against an array (body array or `String.Array`) it follows the same rule as every
//!   other condition: it matches if **any** element is not excluded, so `["a","b"]` matches
//!   `{"anything-but": "a"}` and `["a"]` does not. (AWS's documentation leaves this open.)
//! * **Arrays of objects** in the body: each key is satisfied independently by any element;
//!   two keys need not be satisfied by the same element.
//! * **`cidr`** matches address strings of the network's family only (an IPv4-mapped IPv6
//!   address does not match an IPv4 network).
//! * **`{}`** matches every message (in the body scope, every JSON object body).
//!
//! # Validation and limits
//!
//! Errors are [`PolicyError`]s whose `Display` starts `filter_policy: `, worded like SNS's
//! where SNS has a wording. At most [`MAX_POLICY_BYTES`] of JSON; at most [`MAX_KEYS`]
//! top-level keys per alternative (a nested body key counts as its top-level parent; the keys
//! of a top-level `$or` branch are top-level keys of that alternative); at most
//! [`MAX_COMBINATIONS`] combinations, counted as SNS counts them: every list of conditions
//! contributes its length times its nesting depth (1 at the top level; this is AWS's
//! documented worked example, `3 × 4 × 2 × 3 = 72`, and what AWS enforces), keys multiply,
//! and the branches of an `$or` add up. `numeric` operands must lie within ±1e9; exact
//! number values are not range-checked (AWS accepts them).
//! Nesting deeper than [`MAX_POLICY_DEPTH`] objects is rejected. CIDR host bits are masked
//! off rather than rejected.

mod attributes;
mod body;
mod cidr;
mod condition;
mod error;
mod mismatch;
mod parse;

use serde_json::Value;

pub use attributes::{AttributeRef, AttributeValue, MessageAttributes};
pub use error::PolicyError;
pub use mismatch::{KeyMismatch, KeyMismatchReason, Mismatch};

use attributes::Kind;
use body::{PathTrie, Seen};
use condition::{Condition, Scalar};
use parse::{Compiled, Term};

/// Largest policy accepted, in bytes of JSON text (256 KiB).
pub const MAX_POLICY_BYTES: usize = 256 * 1024;
/// Most top-level keys in one alternative.
pub const MAX_KEYS: usize = 5;
/// Most combinations (see the crate docs for how they are counted).
pub const MAX_COMBINATIONS: u64 = 150;
/// Deepest nesting of objects (nested keys and `$or` branches) accepted.
pub const MAX_POLICY_DEPTH: usize = 32;

/// What a policy is matched against (SNS's `FilterPolicyScope`). Stored and shown in Sluice's
/// own API as `attributes` or `body`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum FilterScope {
    /// Message attributes (`MessageAttributes`, SNS's default).
    #[default]
    Attributes,
    /// The message body as a JSON object (`MessageBody`).
    Body,
}

impl FilterScope {
    /// The scope for SNS's `FilterPolicyScope` value (`MessageAttributes`, `MessageBody`).
    pub fn from_aws_name(name: &str) -> Option<Self> {
        match name {
            "MessageAttributes" => Some(Self::Attributes),
            "MessageBody" => Some(Self::Body),
            _ => None,
        }
    }

    /// SNS's `FilterPolicyScope` value for this scope.
    pub fn aws_name(self) -> &'static str {
        match self {
            Self::Attributes => "MessageAttributes",
            Self::Body => "MessageBody",
        }
    }
}

/// A policy given as JSON text or as an already parsed JSON value.
pub trait PolicySource {
    /// Validates and compiles the policy for `scope`.
    fn compile(&self, scope: FilterScope) -> Result<FilterPolicy, PolicyError>;
}

impl PolicySource for Value {
    fn compile(&self, scope: FilterScope) -> Result<FilterPolicy, PolicyError> {
        Ok(FilterPolicy::new(scope, parse::compile(self, scope, None)?))
    }
}

impl PolicySource for str {
    fn compile(&self, scope: FilterScope) -> Result<FilterPolicy, PolicyError> {
        // Checked before parsing so an oversized policy costs no parse.
        parse::check_size(self.len())?;
        let value: Value =
            serde_json::from_str(self).map_err(|error| PolicyError::InvalidJson {
                reason: error.to_string(),
            })?;
        Ok(FilterPolicy::new(
            scope,
            parse::compile(&value, scope, Some(self.len()))?,
        ))
    }
}

impl PolicySource for String {
    fn compile(&self, scope: FilterScope) -> Result<FilterPolicy, PolicyError> {
        self.as_str().compile(scope)
    }
}

/// A validated, compiled filter policy.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterPolicy {
    scope: FilterScope,
    /// Keys, one rule per leaf, and the terms (all must hold; `$or` as a tree).
    compiled: Compiled,
    /// The rules' paths, for the body walk.
    paths: PathTrie,
}

/// The outcome of one key rule, kept `Copy` so matching builds no explanation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Pass,
    Fail(KeyMismatchReason),
}

impl FilterPolicy {
    fn new(scope: FilterScope, compiled: Compiled) -> Self {
        let paths = PathTrie::new(&compiled);
        Self {
            scope,
            compiled,
            paths,
        }
    }

    /// Validates `policy` (JSON text or a [`serde_json::Value`]) for `scope` and compiles it.
    pub fn parse<P: PolicySource + ?Sized>(
        policy: &P,
        scope: FilterScope,
    ) -> Result<Self, PolicyError> {
        policy.compile(scope)
    }

    /// The scope the policy was validated for. The `matches_*` methods do not check it: a
    /// body-scoped policy given attributes treats its dotted paths as attribute names.
    pub fn scope(&self) -> FilterScope {
        self.scope
    }

    /// Bytes the compiled policy holds on the heap (an estimate from lengths and
    /// capacities, without the allocator's overhead). See the crate docs for its bound.
    pub fn heap_size(&self) -> usize {
        use std::mem::size_of;
        let compiled = &self.compiled;
        let keys = compiled.keys.capacity() * size_of::<parse::KeyNode>()
            + compiled.keys.iter().map(|k| k.name.len()).sum::<usize>();
        let rules = compiled.rules.capacity() * size_of::<parse::Rule>()
            + compiled
                .rules
                .iter()
                .map(|rule| {
                    rule.conditions.capacity() * size_of::<Condition>()
                        + rule
                            .conditions
                            .iter()
                            .map(Condition::heap_size)
                            .sum::<usize>()
                })
                .sum::<usize>();
        keys + rules + terms_heap_size(&compiled.terms) + self.paths.heap_size()
    }

    /// Whether a message with these attributes passes the policy.
    pub fn matches_attributes<A: MessageAttributes + ?Sized>(&self, attributes: &A) -> bool {
        holds(&self.compiled.terms, &mut |rule| {
            self.attribute_outcome(rule, attributes) == Outcome::Pass
        })
    }

    /// Like [`Self::matches_attributes`], saying why not.
    pub fn explain_attributes<A: MessageAttributes + ?Sized>(
        &self,
        attributes: &A,
    ) -> Result<(), Mismatch> {
        self.explain(|rule| self.attribute_outcome(rule, attributes))
    }

    /// Whether a message with this body passes the policy.
    pub fn matches_body(&self, body: &str) -> bool {
        serde_json::from_str::<Value>(body).is_ok_and(|value| self.matches_body_json(&value))
    }

    /// Like [`Self::matches_body`] for a body already parsed.
    pub fn matches_body_json(&self, body: &Value) -> bool {
        let Value::Object(object) = body else {
            return false;
        };
        let seen = self.walk_body(object);
        holds(&self.compiled.terms, &mut |rule| {
            self.body_outcome(rule, &seen) == Outcome::Pass
        })
    }

    /// Like [`Self::matches_body`], saying why not.
    pub fn explain_body(&self, body: &str) -> Result<(), Mismatch> {
        let value: Value = serde_json::from_str(body).map_err(|_| Mismatch::BodyNotJson)?;
        self.explain_body_json(&value)
    }

    /// Like [`Self::matches_body_json`], saying why not.
    pub fn explain_body_json(&self, body: &Value) -> Result<(), Mismatch> {
        let Value::Object(object) = body else {
            return Err(Mismatch::BodyNotObject);
        };
        let seen = self.walk_body(object);
        self.explain(|rule| self.body_outcome(rule, &seen))
    }

    /// One walk of the body for every rule at once.
    fn walk_body(&self, object: &serde_json::Map<String, Value>) -> Vec<Seen> {
        let mut seen = vec![Seen::default(); self.compiled.rules.len()];
        self.paths.walk(object, &mut seen, &|rule, leaf| {
            let Some(rule) = self.compiled.rules.get(rule as usize) else {
                return false;
            };
            Scalar::from_json(leaf).is_some_and(|scalar| accepts_value(&rule.conditions, scalar))
        });
        seen
    }

    fn body_outcome(&self, rule: u32, seen: &[Seen]) -> Outcome {
        match (
            self.compiled.rules.get(rule as usize),
            seen.get(rule as usize),
        ) {
            (Some(rule), Some(seen)) => decide(&rule.conditions, seen.present, seen.matched),
            _ => Outcome::Fail(KeyMismatchReason::Missing),
        }
    }

    fn attribute_outcome<A: MessageAttributes + ?Sized>(
        &self,
        rule: u32,
        attributes: &A,
    ) -> Outcome {
        let Some(rule) = self.compiled.rules.get(rule as usize) else {
            return Outcome::Fail(KeyMismatchReason::Missing);
        };
        let Some(key) = self.compiled.keys.get(rule.key as usize) else {
            return Outcome::Fail(KeyMismatchReason::Missing);
        };
        // A body-scope policy's nested keys read as their dotted path.
        let path = match key.parent {
            None => std::borrow::Cow::Borrowed(&*key.name),
            Some(_) => std::borrow::Cow::Owned(self.compiled.path(rule)),
        };
        let found = attributes.attribute(&path).and_then(|attribute| {
            Kind::of(attribute.data_type).map(|kind| (kind, attribute.value))
        });
        let matched = found.is_some_and(|(kind, value)| {
            attributes::any_scalar(kind, value, |scalar| {
                accepts_value(&rule.conditions, scalar)
            })
        });
        decide(&rule.conditions, found.is_some(), matched)
    }

    /// The first failing key of every alternative, in the policy's order, unless one passes.
    fn explain(&self, outcome: impl Fn(u32) -> Outcome) -> Result<(), Mismatch> {
        let alternatives = Compiled::alternatives(&self.compiled.terms);
        let mut failures = Vec::with_capacity(alternatives.len());
        for alternative in alternatives {
            let failure = alternative.iter().find_map(|&rule| match outcome(rule) {
                Outcome::Pass => None,
                Outcome::Fail(reason) => Some(KeyMismatch {
                    key: self
                        .compiled
                        .rules
                        .get(rule as usize)
                        .map(|rule| self.compiled.path(rule))
                        .unwrap_or_default(),
                    reason,
                }),
            });
            match failure {
                None => return Ok(()),
                Some(failure) => failures.push(failure),
            }
        }
        Err(Mismatch::Keys(failures))
    }
}

/// Whether every term holds, judging each rule once at most (each appears once in the tree).
fn holds(terms: &[Term], pass: &mut dyn FnMut(u32) -> bool) -> bool {
    terms.iter().all(|term| match term {
        Term::Rule(rule) => pass(*rule),
        Term::Or(branches) => branches.iter().any(|branch| holds(branch, pass)),
    })
}

fn terms_heap_size(terms: &[Term]) -> usize {
    std::mem::size_of_val(terms)
        + terms
            .iter()
            .map(|term| match term {
                Term::Rule(_) => 0,
                Term::Or(branches) => {
                    branches.capacity() * std::mem::size_of::<Vec<Term>>()
                        + branches.iter().map(|b| terms_heap_size(b)).sum::<usize>()
                }
            })
            .sum::<usize>()
}

fn accepts_value(conditions: &[Condition], scalar: Scalar<'_>) -> bool {
    conditions.iter().any(|condition| condition.accepts(scalar))
}

/// Combines a key's value matching with its `exists` conditions.
fn decide(conditions: &[Condition], present: bool, value_matched: bool) -> Outcome {
    let exists_matched = conditions.contains(&Condition::Exists(present));
    if value_matched || exists_matched {
        return Outcome::Pass;
    }
    let only_absence_allowed = conditions
        .iter()
        .all(|condition| *condition == Condition::Exists(false));
    Outcome::Fail(if !present {
        KeyMismatchReason::Missing
    } else if only_absence_allowed {
        KeyMismatchReason::MustNotExist
    } else {
        KeyMismatchReason::NoConditionMatched
    })
}
