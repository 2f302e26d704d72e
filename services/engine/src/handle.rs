//! Receipt handles: which queue incarnation, which message, which delivery.
//!
//! A handle names one delivery. The queue's `uid` (new for every creation of a name) makes a
//! handle from another queue, or from a deleted and re-created one, recognisably foreign; the
//! `delivery` number changes with every receive, so a handle from an earlier delivery is stale.

/// The decoded form of a receipt handle. Engines choose `delivery` so that no two deliveries of
/// one message share it, also across restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReceiptHandle {
    /// The queue incarnation that issued the handle.
    pub queue_uid: u64,
    /// The message's position in that queue.
    pub seq: u64,
    /// Which delivery of the message this handle belongs to.
    pub delivery: u64,
}

const ENCODED_BYTES: usize = 24;
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

impl ReceiptHandle {
    /// The URL-safe text form (unpadded base64url of 24 bytes: 32 characters).
    pub fn encode(&self) -> String {
        let mut raw = [0u8; ENCODED_BYTES];
        raw[..8].copy_from_slice(&self.queue_uid.to_be_bytes());
        raw[8..16].copy_from_slice(&self.seq.to_be_bytes());
        raw[16..].copy_from_slice(&self.delivery.to_be_bytes());
        let mut out = String::with_capacity(32);
        for chunk in raw.chunks(3) {
            let n = (u32::from(chunk[0]) << 16) | (u32::from(chunk[1]) << 8) | u32::from(chunk[2]);
            for shift in [18, 12, 6, 0] {
                out.push(ALPHABET[((n >> shift) & 63) as usize] as char);
            }
        }
        out
    }

    /// Parses the text form; `None` for anything [`encode`](Self::encode) cannot have produced.
    pub fn decode(text: &str) -> Option<Self> {
        let bytes = text.as_bytes();
        if bytes.len() != 32 {
            return None;
        }
        let mut raw = [0u8; ENCODED_BYTES];
        for (i, quad) in bytes.chunks(4).enumerate() {
            let mut n = 0u32;
            for &c in quad {
                let v = ALPHABET.iter().position(|&a| a == c)? as u32;
                n = (n << 6) | v;
            }
            raw[i * 3] = (n >> 16) as u8;
            raw[i * 3 + 1] = (n >> 8) as u8;
            raw[i * 3 + 2] = n as u8;
        }
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&raw[i..i + 8]);
            u64::from_be_bytes(b)
        };
        Some(Self {
            queue_uid: word(0),
            seq: word(8),
            delivery: word(16),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_foreign_text() {
        let h = ReceiptHandle {
            queue_uid: u64::MAX - 3,
            seq: 42,
            delivery: 0xdead_beef,
        };
        let text = h.encode();
        assert_eq!(text.len(), 32);
        assert!(text
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
        assert_eq!(ReceiptHandle::decode(&text), Some(h));
        assert_eq!(ReceiptHandle::decode("not-a-handle"), None);
        assert_eq!(ReceiptHandle::decode(&text.replace('A', "+")), None);
        assert_eq!(ReceiptHandle::decode(&format!("{text}A")), None);
    }
}
