//! The typed validation errors of a filter policy. Every message starts `filter_policy: ` so
//! the API layers can return it verbatim as a 400 `ValidationError`; where SNS has a wording
//! for the same fault, the text after the prefix follows it.

use thiserror::Error;

/// Why a filter policy was rejected at subscribe time.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The policy's JSON text is larger than [`crate::MAX_POLICY_BYTES`].
    #[error("filter_policy: policy is {size} bytes; at most 262144 (256 KiB) are allowed")]
    TooLarge {
        /// Size of the policy's JSON text in bytes.
        size: usize,
    },
    /// The policy text is not JSON.
    #[error("filter_policy: policy is not valid JSON: {reason}")]
    InvalidJson {
        /// The JSON parser's description of the fault.
        reason: String,
    },
    /// The policy is JSON but not an object.
    #[error("filter_policy: policy must be a JSON object")]
    NotAnObject,
    /// Objects nested deeper than [`crate::MAX_POLICY_DEPTH`].
    #[error("filter_policy: policy is nested more than 32 levels deep")]
    TooDeep,
    /// One `$or` alternative names more than [`crate::MAX_KEYS`] top-level keys.
    #[error("filter_policy: Filter policy can not have more than 5 keys (found {count})")]
    TooManyKeys {
        /// Number of distinct top-level keys in the largest alternative, counted up to 64.
        count: usize,
    },
    /// More than [`crate::MAX_COMBINATIONS`] combinations, counted as SNS counts them.
    #[error(
        "filter_policy: Filter policy is too complex ({combinations} combinations; at most 150)"
    )]
    TooComplex {
        /// The counted combinations (saturating).
        combinations: u64,
    },
    /// A nested object in a policy whose scope is message attributes.
    #[error("filter_policy: Filter policy scope MessageAttributes does not support nested filter policy (key \"{key}\")")]
    NestedInAttributesScope {
        /// The key whose value is an object.
        key: String,
    },
    /// A key's value is a scalar instead of a list of conditions or a nested object.
    #[error("filter_policy: \"{key}\" must be an object or an array")]
    MustBeObjectOrArray {
        /// The offending key.
        key: String,
    },
    /// A nested object (or `$or` branch) with no keys, which would constrain nothing.
    #[error("filter_policy: \"{key}\" must not be an empty object")]
    EmptyObject {
        /// The key whose value is `{}` (`$or` for a branch).
        key: String,
    },
    /// An empty list of conditions or an empty `anything-but` list.
    #[error("filter_policy: Empty arrays are not allowed (key \"{key}\")")]
    EmptyArray {
        /// The key holding the empty list.
        key: String,
    },
    /// `$or` that is not a list of at least two objects.
    #[error("filter_policy: $or must be an array of at least two objects")]
    InvalidOr,
    /// A condition that is a list (or another non-condition).
    #[error(
        "filter_policy: Match value must be String, number, true, false, or null (key \"{key}\")"
    )]
    BadMatchValue {
        /// The key holding the condition.
        key: String,
    },
    /// An operator object with zero or several keys.
    #[error("filter_policy: Only one key allowed in match expression (key \"{key}\")")]
    OnlyOneKey {
        /// The key holding the condition.
        key: String,
    },
    /// An operator the language does not have.
    #[error("filter_policy: Unrecognized match type {operator}")]
    UnrecognizedMatchType {
        /// The unknown operator.
        operator: String,
    },
    /// `prefix`, `suffix`, `equals-ignore-case` or `cidr` with a non-string operand.
    #[error("filter_policy: {operator} match pattern must be a string")]
    PatternMustBeString {
        /// The operator.
        operator: &'static str,
    },
    /// `exists` with a non-boolean operand.
    #[error("filter_policy: exists match pattern must be either true or false.")]
    ExistsMustBeBool,
    /// `anything-but` with an object operand other than `{"prefix": …}`.
    #[error("filter_policy: Unsupported anything-but pattern: {operator}")]
    UnsupportedAnythingBut {
        /// The operator found inside `anything-but`.
        operator: String,
    },
    /// `anything-but` whose operand (or list element) is not a string or a number.
    #[error("filter_policy: anything-but values must be strings or numbers")]
    AnythingButValue,
    /// `numeric` whose operand is not a list.
    #[error("filter_policy: numeric match pattern must be an array")]
    NumericMustBeArray,
    /// `numeric` list that does not start with an operator.
    #[error("filter_policy: Invalid member in numeric match: {member}")]
    InvalidNumericMember {
        /// The offending member (`]` for an empty list).
        member: String,
    },
    /// `numeric` with an operator other than `=`, `<`, `<=`, `>`, `>=`.
    #[error("filter_policy: Unrecognized numeric range operator: {operator}")]
    UnrecognizedNumericOperator {
        /// The unknown operator.
        operator: String,
    },
    /// A numeric operator not followed by a number.
    #[error("filter_policy: Value of {operator} must be numeric")]
    NumericValueNotNumeric {
        /// The operator (`equals` for `=`).
        operator: String,
    },
    /// `=`, `<` or `<=` followed by more terms.
    #[error("filter_policy: Too many elements in numeric expression")]
    TooManyNumericElements,
    /// A range's second operator is not a string.
    #[error("filter_policy: Bad value in numeric range: {value}")]
    BadNumericRangeValue {
        /// The offending member.
        value: String,
    },
    /// A range's second operator is not `<` or `<=`.
    #[error("filter_policy: Bad numeric range operator: {operator}")]
    BadNumericRangeOperator {
        /// The offending operator.
        operator: String,
    },
    /// A range whose upper bound is not above its lower bound.
    #[error("filter_policy: Bottom must be less than top")]
    BottomNotLessThanTop,
    /// A range with more than two operator/value pairs.
    #[error("filter_policy: Too many terms in numeric range expression")]
    TooManyNumericTerms,
    /// A `numeric` operand outside SNS's range of ±1e9.
    #[error("filter_policy: numeric value {value} is outside -1000000000..=1000000000")]
    NumericOutOfRange {
        /// The offending operand.
        value: String,
    },
    /// A `cidr` operand without exactly one `/`.
    #[error("filter_policy: Malformed CIDR, one '/' required")]
    MalformedCidrSlash,
    /// A `cidr` mask that is not an integer.
    #[error("filter_policy: Malformed CIDR, mask bits must be an integer")]
    MalformedCidrMask,
    /// A `cidr` mask longer than the address (32 for IPv4, 128 for IPv6).
    #[error("filter_policy: Malformed CIDR, mask bits {bits} exceed {max}")]
    CidrMaskTooLong {
        /// The mask length given.
        bits: u32,
        /// The longest mask for the address family.
        max: u32,
    },
    /// A `cidr` operand whose address part is not an IPv4 or IPv6 address.
    #[error("filter_policy: Nonstandard IP address: {address}")]
    NonstandardIp {
        /// The address part.
        address: String,
    },
}
