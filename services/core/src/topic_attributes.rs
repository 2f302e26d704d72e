//! Limits on the attributes the AWS endpoint stores on topics and subscriptions without acting
//! on them (`Policy`, `DisplayName`, `DeliveryPolicy`, role ARNs, …; opaque `aws_attributes`
//! in [`crate::topics`]). They live in the topic's record, which every publish reads, so
//! their size is what a publish pays: SNS's own limits where it documents one (an access
//! policy of at most 30 KiB, a display name of at most 100 characters), and for the rest a
//! bound well above any value SNS accepts (ARNs are at most 2,048 characters; the small JSON
//! policies a few hundred bytes). With them a topic's own attributes are at most
//! [`MAX_TOPIC_ATTRIBUTES_BYTES`] and a subscription's at most
//! [`MAX_SUBSCRIPTION_ATTRIBUTES_BYTES`] beyond its filter policy.
//!
//! Checked before any write, so a refused call changes nothing; the error names the
//! attribute, which the AWS endpoint answers as SNS's `InvalidParameter`.

use crate::ServiceError;

/// SNS's limit on an access policy (`Policy`), and the bound Sluice applies to the other
/// JSON policies it stores (`DeliveryPolicy`, `DataProtectionPolicy`).
pub const MAX_POLICY_ATTRIBUTE_BYTES: usize = 30 * 1024;
/// SNS's limit on a topic's `DisplayName`, in characters.
pub const MAX_DISPLAY_NAME_CHARS: usize = 100;
/// Every other stored attribute (ARNs, key ids, sample rates, small settings).
pub const MAX_OTHER_ATTRIBUTE_BYTES: usize = 2048;

/// The attributes with [`MAX_POLICY_ATTRIBUTE_BYTES`].
const POLICIES: [&str; 3] = ["Policy", "DeliveryPolicy", "DataProtectionPolicy"];

/// The most bytes of stored attributes a topic may hold: its three policies at their limit
/// and about twenty other attributes at theirs.
pub const MAX_TOPIC_ATTRIBUTES_BYTES: usize =
    3 * MAX_POLICY_ATTRIBUTE_BYTES + 24 * MAX_OTHER_ATTRIBUTE_BYTES;
/// The most bytes of stored attributes a subscription may hold besides its filter policy
/// text (which the filter's 256 KiB bounds): a `DeliveryPolicy` and the small ones
/// (`RedrivePolicy`, `SubscriptionRoleArn`, `ReplayPolicy`).
pub const MAX_SUBSCRIPTION_ATTRIBUTES_BYTES: usize =
    MAX_POLICY_ATTRIBUTE_BYTES + 3 * MAX_OTHER_ATTRIBUTE_BYTES;

/// Checks one stored attribute's value against its limit; the error names the attribute.
/// `FilterPolicy`'s text is bounded by the filter's own limit, checked when it is compiled.
pub(crate) fn check_stored_attribute(name: &str, value: &str) -> Result<(), ServiceError> {
    if name == "FilterPolicy" {
        return Ok(());
    }
    if name == "DisplayName" {
        let chars = value.chars().count();
        if chars > MAX_DISPLAY_NAME_CHARS {
            return Err(ServiceError::invalid(
                name,
                format!("must be at most {MAX_DISPLAY_NAME_CHARS} characters, got {chars}"),
            ));
        }
        return Ok(());
    }
    let limit = if POLICIES.contains(&name) {
        MAX_POLICY_ATTRIBUTE_BYTES
    } else {
        MAX_OTHER_ATTRIBUTE_BYTES
    };
    if value.len() > limit {
        return Err(ServiceError::invalid(
            name,
            format!("must be at most {limit} bytes, got {}", value.len()),
        ));
    }
    Ok(())
}

/// Checks every value being set (`None` removes an attribute and is always allowed).
pub(crate) fn check_stored_attributes<'a>(
    attributes: impl IntoIterator<Item = (&'a String, Option<&'a String>)>,
) -> Result<(), ServiceError> {
    for (name, value) in attributes {
        if let Some(value) = value {
            check_stored_attribute(name, value)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_attribute_has_its_limit() {
        let ok = |name: &str, len: usize| check_stored_attribute(name, &"x".repeat(len)).is_ok();
        assert!(ok("Policy", 30 * 1024));
        assert!(!ok("Policy", 30 * 1024 + 1));
        assert!(ok("DeliveryPolicy", 30 * 1024));
        assert!(!ok("DeliveryPolicy", 30 * 1024 + 1));
        assert!(ok("DisplayName", 100));
        assert!(!ok("DisplayName", 101));
        // Characters, not bytes.
        assert!(check_stored_attribute("DisplayName", &"é".repeat(100)).is_ok());
        assert!(ok("SQSSuccessFeedbackRoleArn", 2048));
        assert!(!ok("SQSSuccessFeedbackRoleArn", 2049));
        assert!(ok("FilterPolicy", 100_000));
        let Err(ServiceError::Validation { field, .. }) =
            check_stored_attribute("Policy", &"x".repeat(40_000))
        else {
            panic!("a long policy is refused");
        };
        assert_eq!(field, "Policy");
    }
}
