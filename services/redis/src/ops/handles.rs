//! How the parts of a receipt handle travel to the scripts: the message's sorted-set member,
//! the delivery number (counter and salt) and its `<counter>-<salt>` token, and the scripts'
//! per-handle status codes.

use sluice_engine::HandleError;

pub(crate) fn member(seq: u64) -> String {
    format!("{seq:016}")
}

/// Bits of a handle's delivery number that hold the per-receive random salt; the queue's
/// delivery counter fills the rest (2^44 deliveries per queue incarnation).
pub(crate) const SALT_BITS: u32 = 20;

/// The delivery number a handle carries: the counter, then the salt.
pub(crate) fn delivery_number(counter: u64, salt: u64) -> u64 {
    (counter << SALT_BITS) | salt
}

/// How scripts store and compare a delivery: `<counter>-<salt>`.
pub(crate) fn delivery_token(delivery: u64) -> String {
    format!(
        "{}-{}",
        delivery >> SALT_BITS,
        delivery & ((1 << SALT_BITS) - 1)
    )
}

pub(crate) fn handle_error(code: i64) -> Result<(), HandleError> {
    match code {
        0 => Ok(()),
        1 => Err(HandleError::Invalid),
        _ => Err(HandleError::Stale),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_numbers_split_into_the_scripts_token() {
        let d = delivery_number(12_345, 0xF_FFFF);
        assert_eq!(delivery_token(d), "12345-1048575");
        assert_eq!(delivery_token(delivery_number(1, 0)), "1-0");
        assert_eq!(member(42), "0000000000000042");
    }
}
