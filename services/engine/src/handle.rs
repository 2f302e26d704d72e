//! Receipt handles: which queue incarnation, which message, which delivery — authenticated.
//!
//! A handle names one delivery. The queue's `uid` (new for every creation of a name) makes a
//! handle from another queue, or from a deleted and re-created one, recognisably foreign; the
//! `delivery` number changes with every receive, so a handle from an earlier delivery is stale.
//!
//! The fields alone would be guessable (a seq is a counter), so every handle carries a tag:
//! HMAC-SHA256 under the store's [`HandleKey`], truncated to [`TAG_BYTES`]. A handle that was
//! altered in any character, or made up, fails the tag check and is refused before an engine
//! looks at the message it names. The key is generated once per store and kept in it, so every
//! engine instance sharing the store accepts the others' handles.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The decoded form of a receipt handle. Engines choose `delivery` so that no two deliveries of
/// one message share it, also across restarts, and so that it depends on nothing outside the
/// queue (a number shared between queues would let one tenant count another's traffic).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReceiptHandle {
    /// The queue incarnation that issued the handle.
    pub queue_uid: u64,
    /// The message's position in that queue.
    pub seq: u64,
    /// Which delivery of the message this handle belongs to.
    pub delivery: u64,
}

/// The format of the text form; changes with its layout or its tag, so an engine can tell a
/// handle of another format from a forged one if it ever needs to.
const VERSION: u8 = 1;
/// The three fields, big-endian.
const FIELD_BYTES: usize = 24;
/// Bytes of the HMAC-SHA256 output a handle keeps: 160 bits, far beyond guessing by requests.
pub const TAG_BYTES: usize = 20;
/// Version, fields, tag: 45 bytes, a multiple of 3, so the text has no padding or spare bits.
const RAW_BYTES: usize = 1 + FIELD_BYTES + TAG_BYTES;
/// Characters of the text form: the raw bytes in unpadded base64url.
pub const HANDLE_CHARS: usize = RAW_BYTES / 3 * 4;

/// The secret receipt handles are authenticated with: one per store, generated at random the
/// first time the store is opened and kept in it.
#[derive(Clone)]
pub struct HandleKey {
    /// Keyed once: cloning the keyed state is cheaper than keying per handle.
    mac: Hmac<Sha256>,
}

impl std::fmt::Debug for HandleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key itself: Debug output ends up in logs.
        f.write_str("HandleKey(..)")
    }
}

impl HandleKey {
    /// Length of the key material.
    pub const BYTES: usize = 32;

    /// Fresh key material from a cryptographically secure generator, for a store that has none
    /// yet. Store it, then build the key from what the store holds (another process may have
    /// stored its own first).
    pub fn random_bytes() -> [u8; Self::BYTES] {
        rand::random()
    }

    /// The key for stored key material; `None` unless it is [`BYTES`](Self::BYTES) long.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != Self::BYTES {
            return None;
        }
        let mac = <Hmac<Sha256> as KeyInit>::new_from_slice(bytes).ok()?;
        Some(Self { mac })
    }

    fn tagger(&self, signed: &[u8]) -> Hmac<Sha256> {
        let mut mac = self.mac.clone();
        mac.update(signed);
        mac
    }
}

impl ReceiptHandle {
    /// The URL-safe text form: version, fields and tag as unpadded base64url
    /// ([`HANDLE_CHARS`] characters).
    pub fn encode(&self, key: &HandleKey) -> String {
        let mut raw = [0u8; RAW_BYTES];
        raw[0] = VERSION;
        raw[1..9].copy_from_slice(&self.queue_uid.to_be_bytes());
        raw[9..17].copy_from_slice(&self.seq.to_be_bytes());
        raw[17..25].copy_from_slice(&self.delivery.to_be_bytes());
        let tag = key.tagger(&raw[..1 + FIELD_BYTES]).finalize().into_bytes();
        raw[1 + FIELD_BYTES..].copy_from_slice(&tag[..TAG_BYTES]);
        URL_SAFE_NO_PAD.encode(raw)
    }

    /// Parses the text form and checks its tag under `key`; `None` for anything
    /// [`encode`](Self::encode) with this key cannot have produced.
    pub fn decode(text: &str, key: &HandleKey) -> Option<Self> {
        if text.len() != HANDLE_CHARS {
            return None;
        }
        // The strict decoder refuses padding and non-zero spare bits, so each handle has
        // exactly one text form (none here: the length is a multiple of 3 bytes).
        let raw = URL_SAFE_NO_PAD.decode(text).ok()?;
        if raw.len() != RAW_BYTES || raw[0] != VERSION {
            return None;
        }
        let (signed, tag) = raw.split_at(1 + FIELD_BYTES);
        // Constant time: the answer reveals nothing about how much of a guess was right.
        key.tagger(signed).verify_truncated_left(tag).ok()?;
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&signed[i..i + 8]);
            u64::from_be_bytes(b)
        };
        Some(Self {
            queue_uid: word(1),
            seq: word(9),
            delivery: word(17),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

    fn key() -> HandleKey {
        HandleKey::from_bytes(&HandleKey::random_bytes()).unwrap()
    }

    fn sample() -> ReceiptHandle {
        ReceiptHandle {
            queue_uid: u64::MAX - 3,
            seq: 42,
            delivery: 0xdead_beef,
        }
    }

    #[test]
    fn round_trips_url_safe() {
        let key = key();
        let h = sample();
        let text = h.encode(&key);
        assert_eq!(text.len(), HANDLE_CHARS);
        assert!(text.bytes().all(|c| ALPHABET.contains(&c)), "{text}");
        assert_eq!(ReceiptHandle::decode(&text, &key), Some(h));
    }

    #[test]
    fn every_altered_character_is_refused() {
        let key = key();
        let text = sample().encode(&key);
        for i in 0..text.len() {
            for &c in ALPHABET.iter().chain(b"+/=.") {
                if c == text.as_bytes()[i] {
                    continue;
                }
                let mut altered = text.clone().into_bytes();
                altered[i] = c;
                let altered = String::from_utf8(altered).unwrap();
                assert_eq!(ReceiptHandle::decode(&altered, &key), None, "{altered}");
            }
        }
        assert_eq!(ReceiptHandle::decode(&format!("{text}A"), &key), None);
        assert_eq!(ReceiptHandle::decode(&text[1..], &key), None);
        assert_eq!(ReceiptHandle::decode("", &key), None);
        assert_eq!(ReceiptHandle::decode("not-a-handle", &key), None);
    }

    #[test]
    fn another_key_refuses_the_handle() {
        let text = sample().encode(&key());
        assert_eq!(ReceiptHandle::decode(&text, &key()), None);
    }

    #[test]
    fn the_plain_fields_alone_are_not_a_handle() {
        // What an attacker can build from fields they know or guess: every tag they could
        // attach without the key is wrong.
        let key = key();
        let h = sample();
        let mut raw = vec![VERSION];
        raw.extend_from_slice(&h.queue_uid.to_be_bytes());
        raw.extend_from_slice(&h.seq.to_be_bytes());
        raw.extend_from_slice(&h.delivery.to_be_bytes());
        for fill in [0u8, 0xff] {
            let mut forged = raw.clone();
            forged.resize(RAW_BYTES, fill);
            let text = URL_SAFE_NO_PAD.encode(&forged);
            assert_eq!(ReceiptHandle::decode(&text, &key), None);
        }
        let old_format = URL_SAFE_NO_PAD.encode(&raw[1..]);
        assert_eq!(ReceiptHandle::decode(&old_format, &key), None);
    }

    #[test]
    fn key_material_must_have_the_right_length() {
        assert!(HandleKey::from_bytes(&[7; HandleKey::BYTES]).is_some());
        assert!(HandleKey::from_bytes(&[7; HandleKey::BYTES - 1]).is_none());
        assert!(HandleKey::from_bytes(&[]).is_none());
        assert_eq!(format!("{:?}", key()), "HandleKey(..)");
    }

    #[test]
    fn fresh_key_material_differs() {
        assert_ne!(HandleKey::random_bytes(), HandleKey::random_bytes());
    }
}
