//! Tenancy and tokens: isolation between tenants, scopes, refused tokens, the admin API, and
//! public-key verification.

use crate::harness::{assert_error, now_seconds, tenant_token, token, token_with, Server, SECRET};
use base64::Engine as _;
use reqwest::Method;
use serde_json::{json, Value};
use std::process::Command;

#[tokio::test]
async fn tenant_b_cannot_reach_tenant_a() {
    let server = Server::start();
    let a = tenant_token("tenant-a");
    let b = tenant_token("tenant-b");
    server
        .call(Method::PUT, "/v1/queues/private", &a, None)
        .await;
    server
        .call(
            Method::POST,
            "/v1/queues/private/messages",
            &a,
            Some(json!({"body": "secret"})),
        )
        .await;
    let (_, got) = server
        .call(
            Method::POST,
            "/v1/queues/private/messages/receive",
            &a,
            Some(json!({"visibility_timeout_seconds": 0})),
        )
        .await;
    let handle = got["messages"][0]["receipt_handle"]
        .as_str()
        .unwrap()
        .to_owned();

    let (status, list) = server.call(Method::GET, "/v1/queues", &b, None).await;
    assert_eq!(status, 200);
    assert_eq!(list["queues"], json!([]));
    let q = "/v1/queues/private";
    for (method, path, body) in [
        (Method::GET, q.to_owned(), None),
        (
            Method::PATCH,
            q.to_owned(),
            Some(json!({"delay_seconds": 1})),
        ),
        (Method::GET, format!("{q}/messages"), None),
        (
            Method::POST,
            format!("{q}/messages"),
            Some(json!({"body": "x"})),
        ),
        (
            Method::POST,
            format!("{q}/messages/batch"),
            Some(json!({"entries": [{"id": "1", "body": "x"}]})),
        ),
        (
            Method::POST,
            format!("{q}/messages/receive"),
            Some(json!({})),
        ),
        (Method::DELETE, format!("{q}/messages/{handle}"), None),
        (
            Method::PATCH,
            format!("{q}/messages/{handle}"),
            Some(json!({"visibility_timeout_seconds": 0})),
        ),
        (Method::POST, format!("{q}/purge"), None),
        (Method::DELETE, q.to_owned(), None),
    ] {
        let answer = server.call(method.clone(), &path, &b, body).await;
        assert_error(&answer, 404, "QueueNotFound");
        let _ = (method, path);
    }
    // Still all there for its owner.
    let (_, queue) = server.call(Method::GET, q, &a, None).await;
    assert_eq!(queue["stats"]["visible"], 1);
    assert_eq!(queue["config"]["delay_seconds"], 0);
}

#[tokio::test]
async fn scopes_are_enforced() {
    let server = Server::start();
    let manage = token(Some("acme"), "queues:manage");
    let send = token(Some("acme"), "messages:send");
    let consume = token(Some("acme"), "messages:consume");
    assert_eq!(
        server
            .call(Method::PUT, "/v1/queues/q", &manage, None)
            .await
            .0,
        201
    );
    assert_error(
        &server.call(Method::PUT, "/v1/queues/q2", &send, None).await,
        403,
        "Forbidden",
    );
    assert_error(
        &server
            .call(Method::POST, "/v1/queues/q/purge", &consume, None)
            .await,
        403,
        "Forbidden",
    );
    assert_error(
        &server
            .call(
                Method::POST,
                "/v1/queues/q/messages",
                &consume,
                Some(json!({"body": "x"})),
            )
            .await,
        403,
        "Forbidden",
    );
    assert_error(
        &server
            .call(
                Method::POST,
                "/v1/queues/q/messages/receive",
                &send,
                Some(json!({})),
            )
            .await,
        403,
        "Forbidden",
    );
    assert_error(
        &server
            .call(Method::GET, "/v1/queues/q/messages", &manage, None)
            .await,
        403,
        "Forbidden",
    );
    assert_eq!(
        server
            .call(
                Method::POST,
                "/v1/queues/q/messages",
                &send,
                Some(json!({"body": "x"}))
            )
            .await
            .0,
        201
    );
    // Reading a queue needs any one of the three queue scopes.
    for t in [&manage, &send, &consume] {
        assert_eq!(
            server.call(Method::GET, "/v1/queues/q", t, None).await.0,
            200
        );
        assert_eq!(server.call(Method::GET, "/v1/queues", t, None).await.0, 200);
    }
    let publish_only = token(Some("acme"), "topics:publish");
    assert_error(
        &server
            .call(Method::GET, "/v1/queues/q", &publish_only, None)
            .await,
        403,
        "Forbidden",
    );
    // Admin tokens grant /v1/admin only; tenant tokens do not reach it.
    let admin = token(None, "admin");
    assert_error(
        &server.call(Method::GET, "/v1/queues", &admin, None).await,
        403,
        "Forbidden",
    );
    assert_error(
        &server
            .call(Method::GET, "/v1/admin/tenants", &manage, None)
            .await,
        403,
        "Forbidden",
    );
}

#[tokio::test]
async fn bad_tokens_are_unauthenticated() {
    let server = Server::start();
    let path = "/v1/queues";
    let missing =
        crate::harness::decode(server.client.get(server.url(path)).send().await.unwrap()).await;
    assert_error(&missing, 401, "Unauthenticated");
    let not_bearer = crate::harness::decode(
        server
            .client
            .get(server.url(path))
            .header("authorization", "Basic abc")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_error(&not_bearer, 401, "Unauthenticated");

    let scopes = "queues:manage";
    let expired = token_with(Some("acme"), scopes, now_seconds() - 10, SECRET);
    let wrong_key = token_with(
        Some("acme"),
        scopes,
        now_seconds() + 3600,
        "another-secret-of-sufficient-length-000",
    );
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let alg_none = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "JWT"})),
        b64(&json!({"tenant": "acme", "scope": scopes, "exp": now_seconds() + 3600}))
    );
    let no_exp = {
        let claims = json!({"tenant": "acme", "scope": scopes});
        jsonwebtoken::encode(
            &jsonwebtoken::Header::default(),
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
        )
        .unwrap()
    };
    let no_tenant_no_admin = token(None, scopes);
    let bad_tenant = token(Some("Not Valid"), scopes);
    for (name, bad) in [
        ("expired", expired),
        ("wrongly signed", wrong_key),
        ("alg none", alg_none),
        ("no exp", no_exp),
        ("neither tenant nor admin", no_tenant_no_admin),
        ("invalid tenant", bad_tenant),
        ("garbage", "garbage".to_owned()),
    ] {
        let answer = server.call(Method::GET, path, &bad, None).await;
        assert_eq!(answer.0, 401, "{name}: {}", answer.1);
        assert_error(&answer, 401, "Unauthenticated");
    }
    // No token names both a tenant and admin: one signed with the server's key anyway is
    // refused on the tenant's routes and on the admin API alike.
    for both in [
        token(Some("acme"), "admin"),
        token(Some("acme"), "queues:manage admin"),
    ] {
        for route in [path, "/v1/admin/tenants"] {
            let answer = server.call(Method::GET, route, &both, None).await;
            assert_error(&answer, 401, "Unauthenticated");
        }
    }
}

#[tokio::test]
async fn admin_manages_tenants_and_mints_tokens() {
    let server = Server::start();
    let admin = token(None, "admin");
    let (status, created) = server
        .call(
            Method::POST,
            "/v1/admin/tenants",
            &admin,
            Some(json!({"id": "shop", "quotas": {"max_queues": 1}})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["id"], "shop");
    assert_eq!(created["quotas"]["max_queues"], 1);
    assert_error(
        &server
            .call(
                Method::POST,
                "/v1/admin/tenants",
                &admin,
                Some(json!({"id": "shop"})),
            )
            .await,
        409,
        "Conflict",
    );
    assert_error(
        &server
            .call(
                Method::POST,
                "/v1/admin/tenants",
                &admin,
                Some(json!({"id": "Bad!"})),
            )
            .await,
        400,
        "ValidationError",
    );

    // A tenant named only by a token is listed and answered like a created one.
    server
        .call(Method::GET, "/v1/queues", &tenant_token("implicit"), None)
        .await;
    let (_, list) = server
        .call(Method::GET, "/v1/admin/tenants", &admin, None)
        .await;
    let ids: Vec<&str> = list["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["implicit", "shop"]);
    assert_eq!(
        server
            .call(Method::GET, "/v1/admin/tenants/implicit", &admin, None)
            .await
            .0,
        200
    );
    assert_error(
        &server
            .call(
                Method::POST,
                "/v1/admin/tenants",
                &admin,
                Some(json!({"id": "implicit"})),
            )
            .await,
        409,
        "Conflict",
    );
    assert_error(
        &server
            .call(Method::GET, "/v1/admin/tenants/nobody", &admin, None)
            .await,
        404,
        "TenantNotFound",
    );

    // Minting: admin scope refused, ttl bounded, the minted token works.
    assert_error(
        &server
            .call(
                Method::POST,
                "/v1/admin/tenants/shop/tokens",
                &admin,
                Some(json!({"scopes": ["admin"]})),
            )
            .await,
        400,
        "ValidationError",
    );
    assert_error(
        &server
            .call(
                Method::POST,
                "/v1/admin/tenants/shop/tokens",
                &admin,
                Some(json!({"scopes": ["queues:manage"], "ttl_seconds": 59})),
            )
            .await,
        400,
        "ValidationError",
    );
    let (status, minted) = server
        .call(
            Method::POST,
            "/v1/admin/tenants/shop/tokens",
            &admin,
            Some(json!({"scopes": ["queues:manage", "messages:send"], "ttl_seconds": 600})),
        )
        .await;
    assert_eq!(status, 201, "{minted}");
    assert!(minted["expires_at"].as_str().unwrap().ends_with('Z'));
    let shop = minted["token"].as_str().unwrap().to_owned();
    assert_eq!(
        server
            .call(Method::PUT, "/v1/queues/only-one", &shop, None)
            .await
            .0,
        201
    );
    // The quota: one queue.
    let over = server
        .call(Method::PUT, "/v1/queues/second", &shop, None)
        .await;
    assert_error(&over, 429, "QuotaExceeded");
    let (status, patched) = server
        .call(
            Method::PATCH,
            "/v1/admin/tenants/shop",
            &admin,
            Some(json!({"quotas": {"max_queues": 5}})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(patched["quotas"]["max_queues"], 5);
    assert_eq!(
        server
            .call(Method::PUT, "/v1/queues/second", &shop, None)
            .await
            .0,
        201
    );

    // Deleting a tenant deletes its resources.
    assert_eq!(
        server
            .call(Method::DELETE, "/v1/admin/tenants/shop", &admin, None)
            .await
            .0,
        204
    );
    assert_error(
        &server
            .call(Method::GET, "/v1/admin/tenants/shop", &admin, None)
            .await,
        404,
        "TenantNotFound",
    );
    // Its tokens went with it (see tenants.rs for what deletion means for tokens).
    assert_error(
        &server.call(Method::GET, "/v1/queues", &shop, None).await,
        401,
        "Unauthenticated",
    );
}

#[tokio::test]
async fn eddsa_public_key_verification_pins_the_algorithm() {
    let dir = tempfile::tempdir().unwrap();
    let private = dir.path().join("ed25519.pem");
    let public = dir.path().join("ed25519.pub.pem");
    let ok = Command::new("openssl")
        .args(["genpkey", "-algorithm", "ed25519", "-out"])
        .arg(&private)
        .status()
        .expect("openssl is installed (the README's test command installs it)");
    assert!(ok.success());
    assert!(Command::new("openssl")
        .args(["pkey", "-pubout", "-in"])
        .arg(&private)
        .arg("-out")
        .arg(&public)
        .status()
        .unwrap()
        .success());
    let data = dir.path().join("data");
    let server = Server::start_in(
        &data,
        &[
            "--jwt-public-key",
            public.to_str().unwrap(),
            "--jwt-algorithm",
            "EdDSA",
            "--jwt-issuer",
            "https://issuer.example",
            "--jwt-audience",
            "sluice",
        ],
    );
    let key = jsonwebtoken::EncodingKey::from_ed_pem(&std::fs::read(&private).unwrap()).unwrap();
    let sign = |claims: Value| {
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA),
            &claims,
            &key,
        )
        .unwrap()
    };
    let exp = now_seconds() + 3600;
    let good = sign(
        json!({"tenant": "acme", "scope": "queues:manage", "exp": exp, "iss": "https://issuer.example", "aud": "sluice"}),
    );
    assert_eq!(
        server
            .call(Method::PUT, "/v1/queues/q", &good, None)
            .await
            .0,
        201
    );
    let wrong_issuer = sign(
        json!({"tenant": "acme", "scope": "queues:manage", "exp": exp, "iss": "evil", "aud": "sluice"}),
    );
    let wrong_audience = sign(
        json!({"tenant": "acme", "scope": "queues:manage", "exp": exp, "iss": "https://issuer.example", "aud": "other"}),
    );
    let hs256 = token(Some("acme"), "queues:manage");
    for bad in [wrong_issuer, wrong_audience, hs256] {
        assert_error(
            &server.call(Method::GET, "/v1/queues", &bad, None).await,
            401,
            "Unauthenticated",
        );
    }
    // No signing key: the server cannot mint.
    let admin = sign(
        json!({"scope": "admin", "exp": exp, "iss": "https://issuer.example", "aud": "sluice"}),
    );
    server
        .call(
            Method::POST,
            "/v1/admin/tenants",
            &admin,
            Some(json!({"id": "acme2"})),
        )
        .await;
    assert_error(
        &server
            .call(
                Method::POST,
                "/v1/admin/tenants/acme2/tokens",
                &admin,
                Some(json!({"scopes": ["queues:manage"]})),
            )
            .await,
        409,
        "Conflict",
    );
}

/// Signs `claims` with [`SECRET`] (HS256).
fn signed(claims: Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn a_configured_issuer_and_audience_are_required() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(
        dir.path(),
        &[
            "--jwt-secret",
            SECRET,
            "--jwt-issuer",
            "https://issuer.example",
            "--jwt-audience",
            "sluice",
        ],
    );
    let exp = now_seconds() + 3600;
    let claims = |extra: Value| {
        let mut claims = json!({"tenant": "acme", "scope": "queues:manage", "exp": exp});
        for (key, value) in extra.as_object().unwrap() {
            claims[key] = value.clone();
        }
        signed(claims)
    };
    let iss = "https://issuer.example";
    for (name, bad) in [
        ("neither iss nor aud", claims(json!({}))),
        ("no iss", claims(json!({"aud": "sluice"}))),
        ("no aud", claims(json!({"iss": iss}))),
        ("wrong iss", claims(json!({"iss": "evil", "aud": "sluice"}))),
        ("wrong aud", claims(json!({"iss": iss, "aud": "other"}))),
        (
            "aud array without ours",
            claims(json!({"iss": iss, "aud": ["other", "more"]})),
        ),
    ] {
        let answer = server.call(Method::GET, "/v1/queues", &bad, None).await;
        assert_eq!(answer.0, 401, "{name}: {}", answer.1);
        assert_error(&answer, 401, "Unauthenticated");
    }
    for (name, good) in [
        ("aud string", claims(json!({"iss": iss, "aud": "sluice"}))),
        (
            "aud array",
            claims(json!({"iss": iss, "aud": ["other", "sluice"]})),
        ),
    ] {
        let answer = server.call(Method::GET, "/v1/queues", &good, None).await;
        assert_eq!(answer.0, 200, "{name}: {}", answer.1);
    }
}

#[tokio::test]
async fn a_token_is_refused_before_its_nbf() {
    let server = Server::start();
    let now = now_seconds();
    let with_nbf = |nbf: u64| {
        signed(json!({"tenant": "acme", "scope": "queues:manage", "exp": now + 3600, "nbf": nbf}))
    };
    assert_error(
        &server
            .call(Method::GET, "/v1/queues", &with_nbf(now + 600), None)
            .await,
        401,
        "Unauthenticated",
    );
    let (status, answer) = server
        .call(Method::GET, "/v1/queues", &with_nbf(now - 10), None)
        .await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test]
async fn scopes_are_split_on_ascii_spaces_only() {
    let server = Server::start();
    let tenant_setup = tenant_token("acme");
    assert_eq!(
        server
            .call(Method::PUT, "/v1/queues/q", &tenant_setup, None)
            .await
            .0,
        201
    );
    // A no-break space (or a tab) is part of a scope name: "messages:send\u{a0}admin" is one
    // unknown scope, granting neither admin nor sending.
    for joiner in ['\u{a0}', '\t', '\u{2003}'] {
        let sneaky = token(Some("acme"), &format!("messages:send{joiner}admin"));
        assert_error(
            &server
                .call(Method::GET, "/v1/admin/tenants", &sneaky, None)
                .await,
            403,
            "Forbidden",
        );
        assert_error(
            &server
                .call(
                    Method::POST,
                    "/v1/queues/q/messages",
                    &sneaky,
                    Some(json!({"body": "x"})),
                )
                .await,
            403,
            "Forbidden",
        );
        // Without a tenant, the unknown scope is not admin either.
        let admin_only = token(None, &format!("messages:send{joiner}admin"));
        assert_error(
            &server
                .call(Method::GET, "/v1/admin/tenants", &admin_only, None)
                .await,
            401,
            "Unauthenticated",
        );
    }
    // Single ASCII spaces separate scopes.
    let both = token(Some("acme"), "queues:manage messages:send");
    let (status, answer) = server
        .call(
            Method::POST,
            "/v1/queues/q/messages",
            &both,
            Some(json!({"body": "x"})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
}

fn sluice_token(args: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    Command::new(crate::harness::binary())
        .arg("token")
        .args(["--jwt-secret", SECRET, "--data-dir"])
        .arg(dir.path())
        .args(args)
        .env_remove("SLUICE_CONFIG")
        .output()
        .unwrap()
}

#[test]
fn sluice_token_refuses_a_tenant_with_admin_and_unknown_scopes() {
    let both = sluice_token(&["--tenant", "acme", "--scopes", "admin"]);
    assert!(!both.status.success());
    assert!(both.stdout.is_empty(), "no token printed");
    let stderr = String::from_utf8_lossy(&both.stderr);
    assert!(
        stderr.contains("admin cannot be combined with --tenant"),
        "{stderr}"
    );
    let mixed = sluice_token(&["--tenant", "acme", "--scopes", "queues:manage admin"]);
    assert!(!mixed.status.success());
    // The CLI splits as the server does: a no-break space does not separate scopes.
    let sneaky = sluice_token(&["--tenant", "acme", "--scopes", "messages:send\u{a0}admin"]);
    assert!(!sneaky.status.success());
    let stderr = String::from_utf8_lossy(&sneaky.stderr);
    assert!(stderr.contains("unknown scope"), "{stderr}");
    // What remains possible: a tenant token, and an admin token without a tenant.
    for ok in [
        &[
            "--tenant",
            "acme",
            "--scopes",
            "queues:manage messages:send",
        ][..],
        &["--scopes", "admin"][..],
    ] {
        let output = sluice_token(ok);
        assert!(
            output.status.success(),
            "{ok:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
