//! Tenant quotas and deletion under concurrency, and what deleting a tenant means for its
//! tokens: `max_queues` holds against concurrent creations (embedded and Redis), and a deleted
//! tenant's old tokens are refused rather than bringing it back with default quotas.

use crate::harness::{assert_error, now_seconds, token, Server, ALL_TENANT_SCOPES, SECRET};
use jsonwebtoken::{EncodingKey, Header};
use reqwest::Method;
use serde_json::{json, Value};
use sluice_testkit::{unique_prefix, RedisServer};
use std::sync::Arc;

/// A tenant token with every tenant scope and the given `iat` (`None`: no `iat` claim).
fn token_issued(tenant: &str, iat: Option<u64>) -> String {
    let mut claims =
        json!({"tenant": tenant, "scope": ALL_TENANT_SCOPES, "exp": now_seconds() + 3600});
    if let Some(iat) = iat {
        claims["iat"] = json!(iat);
    }
    jsonwebtoken::encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
    )
    .unwrap()
}

/// 50 concurrent `PUT`s of distinct queues against `max_queues: 2`: exactly two are created,
/// the others answer 429 `QuotaExceeded`, and the tenant owns two queues.
async fn concurrent_puts_respect_max_queues(server: Server) {
    let admin = token(None, "admin");
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/admin/tenants",
            &admin,
            Some(json!({"id": "capped", "quotas": {"max_queues": 2}})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let tenant = token_issued("capped", Some(now_seconds()));
    let server = Arc::new(server);
    let mut puts = tokio::task::JoinSet::new();
    for n in 0..50 {
        let (server, tenant) = (Arc::clone(&server), tenant.clone());
        puts.spawn(async move {
            server
                .call(Method::PUT, &format!("/v1/queues/q-{n:02}"), &tenant, None)
                .await
        });
    }
    let mut created = 0;
    while let Some(answer) = puts.join_next().await {
        let answer = answer.unwrap();
        if answer.0 == 201 {
            created += 1;
        } else {
            assert_error(&answer, 429, "QuotaExceeded");
        }
    }
    assert_eq!(created, 2);
    let (status, listed) = server.call(Method::GET, "/v1/queues", &tenant, None).await;
    assert_eq!(status, 200);
    assert_eq!(listed["queues"].as_array().unwrap().len(), 2, "{listed}");
}

#[tokio::test]
async fn concurrent_puts_respect_max_queues_on_embedded() {
    concurrent_puts_respect_max_queues(Server::start()).await;
}

#[tokio::test]
async fn concurrent_puts_respect_max_queues_on_redis() {
    let redis = RedisServer::start().unwrap();
    let (_dir, server) =
        crate::harness::redis_gateway(&redis.url(), &unique_prefix("e2e-quota"), &[]);
    concurrent_puts_respect_max_queues(server).await;
}

async fn tenant(server: &Server, admin: &str, id: &str) -> (u16, Value) {
    server
        .call(Method::GET, &format!("/v1/admin/tenants/{id}"), admin, None)
        .await
}

/// Deleting a tenant revokes its tokens: one minted before (by the admin API or elsewhere) or
/// without `iat` answers 401 and does not re-create the tenant; one issued after the deletion
/// names a fresh tenant; the admin API can re-create it, and mints tokens that work at once.
#[tokio::test]
async fn deleting_a_tenant_revokes_its_tokens() {
    let server = Server::start();
    let admin = token(None, "admin");
    let (status, _) = server
        .call(
            Method::POST,
            "/v1/admin/tenants",
            &admin,
            Some(json!({"id": "gone", "quotas": {"max_queues": 3}})),
        )
        .await;
    assert_eq!(status, 201);
    let (status, minted) = server
        .call(
            Method::POST,
            "/v1/admin/tenants/gone/tokens",
            &admin,
            Some(json!({"scopes": ["queues:manage"]})),
        )
        .await;
    assert_eq!(status, 201, "{minted}");
    let minted = minted["token"].as_str().unwrap().to_owned();
    let external = token_issued("gone", Some(now_seconds() - 60));
    let undated = token_issued("gone", None);
    for t in [&minted, &external, &undated] {
        assert_eq!(
            server.call(Method::PUT, "/v1/queues/q", t, None).await.0 / 100,
            2
        );
    }

    assert_eq!(
        server
            .call(Method::DELETE, "/v1/admin/tenants/gone", &admin, None)
            .await
            .0,
        204
    );
    for t in [&minted, &external, &undated] {
        let answer = server.call(Method::GET, "/v1/queues", t, None).await;
        assert_error(&answer, 401, "Unauthenticated");
        let message = answer.1["error"]["message"].as_str().unwrap();
        assert!(message.contains("deleted"), "{message}");
        assert_error(
            &server.call(Method::PUT, "/v1/queues/q", t, None).await,
            401,
            "Unauthenticated",
        );
    }
    // Not re-created, with default quotas or otherwise.
    assert_error(
        &tenant(&server, &admin, "gone").await,
        404,
        "TenantNotFound",
    );

    // Issued after the deletion (the next second: token times are whole seconds): a fresh
    // tenant with default quotas and none of the old queues.
    let later = token_issued("gone", Some(now_seconds() + 1));
    let (status, listed) = server.call(Method::GET, "/v1/queues", &later, None).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["queues"], json!([]));
    let (status, fresh) = tenant(&server, &admin, "gone").await;
    assert_eq!(status, 200);
    assert_eq!(fresh["quotas"]["max_queues"], Value::Null);
    assert_error(
        &server.call(Method::GET, "/v1/queues", &minted, None).await,
        401,
        "Unauthenticated",
    );

    // Deleted again and re-created by the admin API at once: its new token works in the same
    // second, the old ones stay refused.
    assert_eq!(
        server
            .call(Method::DELETE, "/v1/admin/tenants/gone", &admin, None)
            .await
            .0,
        204
    );
    let (status, _) = server
        .call(
            Method::POST,
            "/v1/admin/tenants",
            &admin,
            Some(json!({"id": "gone", "quotas": {"max_queues": 1}})),
        )
        .await;
    assert_eq!(status, 201);
    let (status, minted_again) = server
        .call(
            Method::POST,
            "/v1/admin/tenants/gone/tokens",
            &admin,
            Some(json!({"scopes": ["queues:manage"]})),
        )
        .await;
    assert_eq!(status, 201);
    let minted_again = minted_again["token"].as_str().unwrap().to_owned();
    assert_eq!(
        server
            .call(Method::PUT, "/v1/queues/q", &minted_again, None)
            .await
            .0,
        201
    );
    // (`later` is left out: dated a second ahead, it may postdate the second deletion.)
    for t in [&minted, &external, &undated] {
        assert_error(
            &server.call(Method::GET, "/v1/queues", t, None).await,
            401,
            "Unauthenticated",
        );
    }
    assert_eq!(
        tenant(&server, &admin, "gone").await.1["quotas"]["max_queues"],
        1
    );
}
