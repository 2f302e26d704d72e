//! The dashboard's session: the bearer token kept in an `HttpOnly` cookie, the CSRF token
//! derived from it, and the checks every state-changing request passes (same origin, matching
//! CSRF token). Pure functions over headers and strings, so they are unit-tested here; the
//! middleware in `mod.rs` applies them.

use axum::http::{header, HeaderMap, HeaderValue};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The session cookie's name. Scoped to `/dashboard`, so the REST API never sees it.
pub const COOKIE: &str = "sluice_dashboard";
/// The form field carrying the CSRF token.
pub const CSRF_FIELD: &str = "csrf";
/// The header carrying the CSRF token (for requests that are not forms).
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The label the CSRF key is derived from the JWT secret with (see [`csrf_key_of`]).
const CSRF_KEY_LABEL: &str = "sluice-dashboard-csrf-key-v1";

/// The CSRF key of gateways verifying tokens with `auth`: derived from their shared HS256
/// secret, so every gateway of a deployment derives the same; a random key of this process
/// when tokens are verified with a public key (forms then work only on the gateway that
/// rendered them: keep sessions sticky there).
pub fn csrf_key_of(auth: &crate::auth::Auth) -> CsrfKey {
    auth.derive_key(CSRF_KEY_LABEL)
        .map_or_else(CsrfKey::random, CsrfKey::from_bytes)
}

/// Derives CSRF tokens from session tokens with a key of the deployment. A CSRF token is
/// useless without the session cookie it was derived from, and an attacker who plants a cookie
/// of their own still cannot derive its CSRF token without the key.
#[derive(Clone)]
pub struct CsrfKey([u8; 32]);

impl CsrfKey {
    /// A fresh random key, for gateways without a shared secret: sessions outlive it (the
    /// cookie holds the bearer token), forms rendered before a restart are refused once and
    /// work after a reload.
    pub fn random() -> Self {
        use rand::RngCore;
        let mut key = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut key);
        CsrfKey(key)
    }

    /// A given key.
    pub fn from_bytes(key: [u8; 32]) -> Self {
        CsrfKey(key)
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC takes keys of any length; 32 bytes cannot fail.
        <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!())
    }

    /// The CSRF token of a session (hex HMAC-SHA256 of its bearer token).
    pub fn token_for(&self, session: &str) -> String {
        let mut mac = self.mac();
        mac.update(b"sluice-dashboard-csrf\0");
        mac.update(session.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// Whether `given` is the CSRF token of `session`, compared in constant time.
    pub fn verify(&self, session: &str, given: &str) -> bool {
        let Ok(bytes) = hex::decode(given) else {
            return false;
        };
        let mut mac = self.mac();
        mac.update(b"sluice-dashboard-csrf\0");
        mac.update(session.as_bytes());
        mac.verify_slice(&bytes).is_ok()
    }
}

/// The session token in the request's cookies, if any.
pub fn session_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim().to_owned())
        .filter(|value| !value.is_empty())
}

/// Whether the request came over TLS, as far as the gateway can know: it serves plain HTTP,
/// so TLS is a reverse proxy's, which says so in `X-Forwarded-Proto`.
pub fn over_tls(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

/// The `Set-Cookie` value that stores `token`. `None` when the token holds characters a
/// cookie value cannot (JWTs never do).
pub fn set_cookie(token: &str, secure: bool) -> Option<HeaderValue> {
    if token.is_empty() || !token.bytes().all(is_cookie_octet) {
        return None;
    }
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{COOKIE}={token}; Path=/dashboard; HttpOnly; SameSite=Strict{secure}"
    ))
    .ok()
}

/// The `Set-Cookie` value that removes the session.
pub fn clear_cookie(secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{COOKIE}=; Path=/dashboard; HttpOnly; SameSite=Strict; Max-Age=0{secure}"
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("sluice_dashboard=; Max-Age=0"))
}

/// RFC 6265's cookie-octet.
fn is_cookie_octet(b: u8) -> bool {
    matches!(b, 0x21 | 0x23..=0x2b | 0x2d..=0x3a | 0x3c..=0x5b | 0x5d..=0x7e)
}

/// Whether a state-changing request comes from a page of this server: its `Origin` must be
/// present and name the host the request was sent to. Browsers send `Origin` on every POST,
/// so a missing one is refused rather than trusted.
pub fn same_origin(headers: &HeaderMap) -> Result<(), &'static str> {
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .ok_or("the request has no Origin header")?;
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .ok_or("the request has no Host header")?;
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .ok_or("the Origin header is not an http(s) origin")?;
    if origin_host.eq_ignore_ascii_case(host) {
        Ok(())
    } else {
        Err("the request comes from another origin")
    }
}

/// The CSRF token a form body carries in its `csrf` field.
pub fn form_csrf(body: &[u8]) -> Option<String> {
    form_urlencoded::parse(body)
        .find(|(name, _)| name == CSRF_FIELD)
        .map(|(_, value)| value.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn csrf_tokens_verify_only_for_their_session_and_key() {
        let key = CsrfKey::from_bytes([7; 32]);
        let token = key.token_for("session-a");
        assert!(key.verify("session-a", &token));
        assert!(!key.verify("session-b", &token), "another session's token");
        assert!(!CsrfKey::from_bytes([8; 32]).verify("session-a", &token));
        assert!(!key.verify("session-a", ""));
        assert!(!key.verify("session-a", "not hex"));
        assert!(!key.verify("session-a", &token[..10]), "a truncated token");
        // Random keys differ, so tokens do not carry across processes' keys.
        assert_ne!(
            CsrfKey::random().token_for("s"),
            CsrfKey::random().token_for("s")
        );
    }

    fn auth(key: crate::auth::KeyMaterial) -> crate::auth::Auth {
        crate::auth::Auth::new(key, None, None).unwrap()
    }

    fn secret(byte: u8) -> crate::auth::KeyMaterial {
        crate::auth::KeyMaterial::Secret(crate::secret::Secret::new(vec![byte; 40]))
    }

    #[test]
    fn gateways_sharing_the_jwt_secret_accept_each_others_forms() {
        // Two gateways, each building its own `Auth` from the same configuration.
        let (one, two) = (csrf_key_of(&auth(secret(1))), csrf_key_of(&auth(secret(1))));
        let token = one.token_for("session-a");
        assert!(two.verify("session-a", &token));
        // Still bound to the session, and useless under another deployment's secret.
        assert!(!two.verify("session-b", &token));
        assert!(!csrf_key_of(&auth(secret(2))).verify("session-a", &token));
        // The derived key is not the JWT secret itself.
        assert!(!CsrfKey::from_bytes([1; 32]).verify("session-a", &token));
        // With a public key there is no shared secret: a key of the process.
        let pem = b"-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n";
        let public = || crate::auth::KeyMaterial::PublicKey {
            algorithm: jsonwebtoken::Algorithm::EdDSA,
            pem: pem.to_vec(),
        };
        let (a, b) = (csrf_key_of(&auth(public())), csrf_key_of(&auth(public())));
        assert!(!b.verify("session-a", &a.token_for("session-a")));
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let map = headers(&[("cookie", "a=1; sluice_dashboard=tok.en-1; b=2")]);
        assert_eq!(session_token(&map).as_deref(), Some("tok.en-1"));
        let map = headers(&[("cookie", "a=1"), ("cookie", "sluice_dashboard=x")]);
        assert_eq!(session_token(&map).as_deref(), Some("x"));
        assert_eq!(
            session_token(&headers(&[("cookie", "sluice_dashboard=")])),
            None
        );
        assert_eq!(
            session_token(&headers(&[("cookie", "xsluice_dashboard=y")])),
            None
        );
        assert_eq!(session_token(&HeaderMap::new()), None);
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_over_tls() {
        let plain = set_cookie("a.b.c", false).unwrap();
        let plain = plain.to_str().unwrap();
        assert!(plain.contains("HttpOnly"), "{plain}");
        assert!(plain.contains("SameSite=Strict"), "{plain}");
        assert!(plain.contains("Path=/dashboard"), "{plain}");
        assert!(!plain.contains("Secure"), "{plain}");
        let tls = set_cookie("a.b.c", true).unwrap();
        assert!(tls.to_str().unwrap().ends_with("; Secure"));
        // A value that would inject attributes or other cookies is refused.
        assert!(set_cookie("a; Domain=evil", false).is_none());
        assert!(set_cookie("", false).is_none());
        let cleared = clear_cookie(false);
        assert!(cleared.to_str().unwrap().contains("Max-Age=0"));
        assert!(over_tls(&headers(&[("x-forwarded-proto", "HTTPS")])));
        assert!(!over_tls(&headers(&[("x-forwarded-proto", "http")])));
    }

    #[test]
    fn only_same_origin_requests_pass() {
        let ok = headers(&[
            ("origin", "http://127.0.0.1:8080"),
            ("host", "127.0.0.1:8080"),
        ]);
        assert!(same_origin(&ok).is_ok());
        let tls = headers(&[
            ("origin", "https://sluice.example"),
            ("host", "sluice.example"),
        ]);
        assert!(same_origin(&tls).is_ok());
        let other = headers(&[
            ("origin", "http://evil.example"),
            ("host", "127.0.0.1:8080"),
        ]);
        assert!(same_origin(&other).is_err());
        let port = headers(&[("origin", "http://127.0.0.1:9"), ("host", "127.0.0.1:8080")]);
        assert!(same_origin(&port).is_err());
        let null = headers(&[("origin", "null"), ("host", "127.0.0.1:8080")]);
        assert!(same_origin(&null).is_err());
        assert!(same_origin(&headers(&[("host", "127.0.0.1:8080")])).is_err());
    }

    #[test]
    fn the_csrf_field_is_read_from_a_form_body() {
        assert_eq!(
            form_csrf(b"body=%3Cb%3E&csrf=abc123&x=1").as_deref(),
            Some("abc123")
        );
        assert_eq!(form_csrf(b"body=csrf%3Dabc"), None);
        assert_eq!(form_csrf(b""), None);
    }
}
