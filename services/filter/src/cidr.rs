//! `cidr` operands: parsed once into a network and mask, matched against IP address strings
//! with `std::net` and integer masking, so matching allocates nothing.

use std::net::IpAddr;

use crate::error::PolicyError;

/// An IPv4 or IPv6 network. Host bits in the policy's address are ignored (masked off),
/// so `10.0.0.7/24` means `10.0.0.0/24`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cidr {
    V4 { network: u32, mask: u32 },
    V6 { network: u128, mask: u128 },
}

impl Cidr {
    pub(crate) fn parse(text: &str) -> Result<Self, PolicyError> {
        let mut parts = text.split('/');
        let (Some(address), Some(bits), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(PolicyError::MalformedCidrSlash);
        };
        let bits: u32 = bits.parse().map_err(|_| PolicyError::MalformedCidrMask)?;
        let ip: IpAddr = address.parse().map_err(|_| PolicyError::NonstandardIp {
            address: address.to_owned(),
        })?;
        match ip {
            IpAddr::V4(v4) => {
                if bits > 32 {
                    return Err(PolicyError::CidrMaskTooLong { bits, max: 32 });
                }
                let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
                Ok(Self::V4 {
                    network: u32::from(v4) & mask,
                    mask,
                })
            }
            IpAddr::V6(v6) => {
                if bits > 128 {
                    return Err(PolicyError::CidrMaskTooLong { bits, max: 128 });
                }
                let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                Ok(Self::V6 {
                    network: u128::from(v6) & mask,
                    mask,
                })
            }
        }
    }

    /// Whether `text` is an address inside this network. Text that is not an address, or an
    /// address of the other family, is outside.
    pub(crate) fn contains(&self, text: &str) -> bool {
        match (self, text.parse::<IpAddr>()) {
            (Self::V4 { network, mask }, Ok(IpAddr::V4(ip))) => u32::from(ip) & mask == *network,
            (Self::V6 { network, mask }, Ok(IpAddr::V6(ip))) => u128::from(ip) & mask == *network,
            _ => false,
        }
    }
}
