//! Payload object keys: `<tenant>/<32 lowercase hex digits>`. The tenant part keeps one tenant's
//! objects under one prefix (so an operator can find, count or remove them); the 128 random bits
//! make keys unguessable, so holding a key of one's own says nothing about anyone else's.

use rand::RngCore;
use std::fmt;

/// The name of one payload object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PayloadKey(String);

/// A string that is not a payload key, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a payload key ({0})")]
pub struct InvalidPayloadKey(&'static str);

const RANDOM_HEX_LEN: usize = 32;

/// Tenant ids are `[a-z0-9_-]`, 1–64 characters (the services validate them); a key's tenant
/// part is held to the same rule so that no key can climb out of its folder or prefix.
fn valid_tenant(tenant: &str) -> bool {
    !tenant.is_empty()
        && tenant.len() <= 64
        && tenant
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

impl PayloadKey {
    /// A new random key for one of `tenant`'s bodies.
    pub fn generate(tenant: &str) -> Result<Self, InvalidPayloadKey> {
        if !valid_tenant(tenant) {
            return Err(InvalidPayloadKey("the tenant must be 1-64 of [a-z0-9_-]"));
        }
        let mut random = [0u8; RANDOM_HEX_LEN / 2];
        rand::thread_rng().fill_bytes(&mut random);
        Ok(Self(format!("{tenant}/{}", hex::encode(random))))
    }

    /// Reads a key kept elsewhere (an engine's message, a listing).
    pub fn parse(text: &str) -> Result<Self, InvalidPayloadKey> {
        let (tenant, random) = text
            .split_once('/')
            .ok_or(InvalidPayloadKey("no '/' between tenant and object"))?;
        if !valid_tenant(tenant) {
            return Err(InvalidPayloadKey("the tenant must be 1-64 of [a-z0-9_-]"));
        }
        if random.len() != RANDOM_HEX_LEN
            || !random
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(InvalidPayloadKey(
                "the object part must be 32 lowercase hex digits",
            ));
        }
        Ok(Self(text.to_owned()))
    }

    /// The tenant whose body this is.
    pub fn tenant(&self) -> &str {
        self.0.split_once('/').map_or("", |(tenant, _)| tenant)
    }

    /// The object part (without the tenant).
    pub fn object(&self) -> &str {
        self.0.split_once('/').map_or("", |(_, object)| object)
    }

    /// The whole key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PayloadKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_parse_back_carry_their_tenant_and_differ() {
        let a = PayloadKey::generate("acme-1").unwrap();
        let b = PayloadKey::generate("acme-1").unwrap();
        assert_ne!(a, b);
        assert_eq!(a.tenant(), "acme-1");
        assert_eq!(a.object().len(), 32);
        assert_eq!(PayloadKey::parse(a.as_str()).unwrap(), a);
    }

    #[test]
    fn keys_that_could_leave_their_prefix_or_are_not_ours_are_refused() {
        for bad in [
            "",
            "acme",
            "../0123456789abcdef0123456789abcdef",
            "acme/../0123456789abcdef0123456789ab",
            "acme/0123456789abcdef0123456789abcdeF",
            "acme/0123456789abcdef0123456789abcde",
            "ACME/0123456789abcdef0123456789abcdef",
            "a/b/0123456789abcdef0123456789abcdef",
            "acme/0123456789abcdef0123456789abcdef/",
        ] {
            assert!(PayloadKey::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(PayloadKey::generate("bad/tenant").is_err());
        assert!(PayloadKey::generate("").is_err());
        assert!(PayloadKey::parse("acme/0123456789abcdef0123456789abcdef").is_ok());
    }
}
