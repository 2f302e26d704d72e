//! Token verification: JWT bearer tokens with a pinned algorithm, their claims, and the scopes
//! of the REST contract. The request side (the `Caller` extractor) lives in `caller.rs`.

use crate::error::ApiError;
use crate::secret::Secret;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use sluice_engine::TenantId;
use std::fmt;

/// A permission a token can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Create, configure, purge and delete queues.
    QueuesManage,
    /// Send messages.
    MessagesSend,
    /// Receive, delete, change visibility, peek.
    MessagesConsume,
    /// Manage topics and subscriptions.
    TopicsManage,
    /// Publish to topics.
    TopicsPublish,
    /// `/v1/admin/*`.
    Admin,
}

impl Scope {
    /// Every scope, in the contract's order.
    pub const ALL: [Scope; 6] = [
        Scope::QueuesManage,
        Scope::MessagesSend,
        Scope::MessagesConsume,
        Scope::TopicsManage,
        Scope::TopicsPublish,
        Scope::Admin,
    ];

    /// The scope's name in tokens.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::QueuesManage => "queues:manage",
            Scope::MessagesSend => "messages:send",
            Scope::MessagesConsume => "messages:consume",
            Scope::TopicsManage => "topics:manage",
            Scope::TopicsPublish => "topics:publish",
            Scope::Admin => "admin",
        }
    }

    /// Parses a scope name.
    pub fn parse(text: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The claims Sluice reads and writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    /// The tenant the token acts for (absent on admin-only tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Scopes separated by ASCII spaces (see [`parse_scopes`]).
    #[serde(default)]
    pub scope: String,
    /// Expiry, seconds since the epoch.
    pub exp: u64,
    /// Issued at, seconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<u64>,
    /// Issuer, when configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    /// Audience, when configured: one string or an array of them (RFC 7519, 4.1.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aud: Option<Audience>,
    /// Not before, seconds since the epoch; a token is refused until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
}

/// The `aud` claim: RFC 7519 allows a single string or an array of strings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Audience {
    /// `"aud": "sluice"`.
    One(String),
    /// `"aud": ["sluice", "other"]`.
    Many(Vec<String>),
}

/// The scopes a `scope` claim grants. OAuth (RFC 6749, 3.3) separates scope tokens with the
/// ASCII space alone: splitting on any other whitespace would let `"messages:send\u{a0}admin"`
/// (a single unknown scope to every other OAuth party) grant `admin` here. Unknown names are
/// ignored, as OAuth scopes usually are.
pub fn parse_scopes(claim: &str) -> Vec<Scope> {
    claim.split(' ').filter_map(Scope::parse).collect()
}

/// How tokens are verified (and minted).
pub struct Auth {
    algorithm: Algorithm,
    decoding: DecodingKey,
    encoding: Option<EncodingKey>,
    validation: Validation,
    issuer: Option<String>,
    audience: Option<String>,
    /// Keys for other purposes derived from the HS256 secret (see [`Auth::derive_key`]).
    derived: Option<Secret<Vec<u8>>>,
}

/// The key material a deployment configures.
#[derive(Debug, Clone)]
pub enum KeyMaterial {
    /// HS256 with a shared secret: verifies and mints.
    Secret(Secret<Vec<u8>>),
    /// A public key in PEM for EdDSA, RS256 or ES256: verifies only.
    PublicKey {
        /// The pinned algorithm.
        algorithm: Algorithm,
        /// The PEM text.
        pem: Vec<u8>,
    },
}

impl Auth {
    /// Builds the verifier; the error names what is wrong with the key.
    pub fn new(
        key: KeyMaterial,
        issuer: Option<String>,
        audience: Option<String>,
    ) -> Result<Self, String> {
        let derived = match &key {
            KeyMaterial::Secret(secret) => Some(secret.clone()),
            KeyMaterial::PublicKey { .. } => None,
        };
        let (algorithm, decoding, encoding) = match key {
            KeyMaterial::Secret(secret) => (
                Algorithm::HS256,
                DecodingKey::from_secret(secret.expose())
                    .map_err(|e| format!("jwt_secret: {e}"))?,
                Some(
                    EncodingKey::from_secret(secret.expose())
                        .map_err(|e| format!("jwt_secret: {e}"))?,
                ),
            ),
            KeyMaterial::PublicKey { algorithm, pem } => {
                let decoding = match algorithm {
                    Algorithm::EdDSA => DecodingKey::from_ed_pem(&pem),
                    Algorithm::RS256 => DecodingKey::from_rsa_pem(&pem),
                    Algorithm::ES256 => DecodingKey::from_ec_pem(&pem),
                    other => return Err(format!("jwt_algorithm: {other:?} is not supported")),
                }
                .map_err(|e| {
                    format!("jwt_public_key: not a {algorithm:?} public key in PEM: {e}")
                })?;
                (algorithm, decoding, None)
            }
        };
        let mut validation = Validation::new(algorithm);
        // A configured issuer or audience is required, not merely checked when present: a
        // token minted for another service without them must not pass.
        let mut required = vec!["exp"];
        if issuer.is_some() {
            required.push("iss");
        }
        if audience.is_some() {
            required.push("aud");
        }
        validation.set_required_spec_claims(&required);
        validation.validate_nbf = true;
        validation.leeway = 0;
        match &issuer {
            Some(iss) => validation.set_issuer(&[iss]),
            None => validation.iss = None,
        }
        match &audience {
            Some(aud) => validation.set_audience(&[aud]),
            None => validation.validate_aud = false,
        }
        Ok(Self {
            algorithm,
            decoding,
            encoding,
            validation,
            issuer,
            audience,
            derived,
        })
    }

    /// A 32-byte key for `label`'s purpose (HMAC-SHA256 of the label under the HS256 secret),
    /// the same in every gateway configured with that secret and useless for signing tokens.
    /// `None` when tokens are verified with a public key: this server then holds no secret
    /// it shares with other gateways.
    pub fn derive_key(&self, label: &str) -> Option<[u8; 32]> {
        use hmac::{Hmac, KeyInit, Mac};
        let secret = self.derived.as_ref()?;
        let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(secret.expose()).ok()?;
        mac.update(label.as_bytes());
        Some(mac.finalize().into_bytes().into())
    }

    /// Verifies a token: signature with the pinned algorithm, expiry, not-before, the
    /// configured issuer and audience (both required when configured), and the rule that no
    /// token names both a tenant and `admin` — one signed elsewhere with both is refused here
    /// as it would be at minting, so such a token never exists as far as this server goes.
    pub fn verify(&self, token: &str) -> Result<Claims, ApiError> {
        let claims = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map(|data| data.claims)
            .map_err(|e| ApiError::Unauthenticated(format!("invalid bearer token: {e}")))?;
        if claims.tenant.is_some() && parse_scopes(&claims.scope).contains(&Scope::Admin) {
            return Err(ApiError::Unauthenticated(
                "invalid bearer token: admin tokens name no tenant".into(),
            ));
        }
        Ok(claims)
    }

    /// Whether this server can mint tokens (it holds the signing key).
    pub fn can_mint(&self) -> bool {
        self.encoding.is_some()
    }

    /// Mints a token for `tenant` (none for admin tokens) with `scopes`, valid `ttl_seconds`
    /// from `now_seconds`. A token with both a tenant and `admin` is refused: admin tokens name
    /// no tenant.
    pub fn mint(
        &self,
        tenant: Option<&TenantId>,
        scopes: &[Scope],
        now_seconds: u64,
        ttl_seconds: u64,
    ) -> Result<String, String> {
        let key = self
            .encoding
            .as_ref()
            .ok_or("this server verifies tokens with a public key and cannot mint them")?;
        if tenant.is_some() && scopes.contains(&Scope::Admin) {
            return Err(
                "scopes: admin cannot be combined with a tenant; admin tokens name no tenant"
                    .into(),
            );
        }
        let claims = Claims {
            tenant: tenant.map(|t| t.as_str().to_owned()),
            scope: scopes
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" "),
            exp: now_seconds + ttl_seconds,
            iat: Some(now_seconds),
            iss: self.issuer.clone(),
            aud: self.audience.clone().map(Audience::One),
            nbf: None,
        };
        jsonwebtoken::encode(&Header::new(self.algorithm), &claims, key).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> Auth {
        let secret = Secret::new(b"unit-test-secret-that-is-long-enough-0123".to_vec());
        Auth::new(KeyMaterial::Secret(secret), None, None).unwrap()
    }

    #[test]
    fn scopes_split_on_ascii_spaces_only() {
        assert_eq!(
            parse_scopes("queues:manage admin"),
            [Scope::QueuesManage, Scope::Admin]
        );
        assert_eq!(parse_scopes(" admin  "), [Scope::Admin]);
        for joiner in ["\u{a0}", "\t", "\n", "\u{2003}", "\u{3000}"] {
            assert_eq!(parse_scopes(&format!("messages:send{joiner}admin")), []);
        }
    }

    #[test]
    fn minting_refuses_a_tenant_with_admin() {
        let auth = auth();
        let tenant = TenantId::parse("acme").unwrap();
        let refused = auth
            .mint(Some(&tenant), &[Scope::Admin], 0, 60)
            .unwrap_err();
        assert!(refused.contains("admin"), "{refused}");
        assert!(auth.mint(None, &[Scope::Admin], 0, 60).is_ok());
        assert!(auth
            .mint(Some(&tenant), &[Scope::MessagesSend], 0, 60)
            .is_ok());
    }

    #[test]
    fn verifying_refuses_a_tenant_with_admin() {
        let auth = auth();
        let signed = |claims: serde_json::Value| {
            jsonwebtoken::encode(
                &Header::new(Algorithm::HS256),
                &claims,
                &EncodingKey::from_secret(b"unit-test-secret-that-is-long-enough-0123").unwrap(),
            )
            .unwrap()
        };
        let exp = u64::MAX / 2;
        let both = signed(serde_json::json!({"tenant": "acme", "scope": "admin", "exp": exp}));
        assert!(matches!(
            auth.verify(&both),
            Err(ApiError::Unauthenticated(_))
        ));
        let mixed = signed(
            serde_json::json!({"tenant": "acme", "scope": "queues:manage admin", "exp": exp}),
        );
        assert!(auth.verify(&mixed).is_err());
        let admin = signed(serde_json::json!({"scope": "admin", "exp": exp}));
        assert!(auth.verify(&admin).is_ok());
    }

    #[test]
    fn claims_read_aud_as_a_string_or_an_array_and_keep_iat() {
        let read = |json: &str| serde_json::from_str::<Claims>(json).unwrap();
        let one = read(r#"{"exp": 1, "aud": "sluice", "iat": 7}"#);
        assert_eq!(one.aud, Some(Audience::One("sluice".into())));
        assert_eq!(one.iat, Some(7));
        let many = read(r#"{"exp": 1, "aud": ["a", "sluice"], "nbf": 3}"#);
        assert_eq!(
            many.aud,
            Some(Audience::Many(vec!["a".into(), "sluice".into()]))
        );
        assert_eq!(many.nbf, Some(3));
    }
}
