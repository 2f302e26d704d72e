//! Tenant rate limits (`requests_per_second`, `burst`), end to end: the bucket refuses past its
//! burst with 429 `RateLimited` and `Retry-After`, counts refused requests too, leaves other
//! tenants and the admin API alone, validates its quota fields, and holds across two gateways
//! sharing one Redis.

use crate::harness::{assert_error, tenant_token, token, Server, SECRET};
use reqwest::Method;
use serde_json::{json, Value};
use sluice_testkit::{unique_prefix, RedisServer};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

async fn create_tenant(server: &Server, id: &str, quotas: Value) {
    let answer = server
        .call(
            Method::POST,
            "/v1/admin/tenants",
            &token(None, "admin"),
            Some(json!({"id": id, "quotas": quotas})),
        )
        .await;
    assert_eq!(answer.0, 201, "{}", answer.1);
}

/// Calls `GET /v1/queues` until the first 429 (at most `bound` calls): answers how many were
/// admitted before it, the 429's body and its `Retry-After`.
async fn until_limited(server: &Server, token: &str, bound: usize) -> (usize, Value, String) {
    for admitted in 0..bound {
        let response = server
            .request(Method::GET, "/v1/queues", token)
            .send()
            .await
            .unwrap();
        if response.status() == 429 {
            let retry_after = response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default();
            return (admitted, response.json().await.unwrap(), retry_after);
        }
        assert_eq!(response.status(), 200);
    }
    panic!("{bound} requests and none was rate limited");
}

#[tokio::test]
async fn past_its_burst_a_tenant_is_refused_with_retry_after_others_and_admin_are_not() {
    let server = Server::start();
    create_tenant(
        &server,
        "limited",
        json!({"requests_per_second": 5, "burst": 5}),
    )
    .await;
    let limited = tenant_token("limited");
    let started = Instant::now();
    let (admitted, body, retry_after) = until_limited(&server, &limited, 100).await;
    // The burst at once, plus at most what the rate refilled meanwhile.
    let refilled = (started.elapsed().as_secs_f64() * 5.0).ceil() as usize;
    assert!(
        (5..=5 + refilled).contains(&admitted),
        "admitted {admitted} (refilled at most {refilled})"
    );
    assert_error(&(429, body.clone()), 429, "RateLimited");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("requests_per_second"),
        "{body}"
    );
    let seconds: u64 = retry_after.parse().expect("Retry-After is whole seconds");
    assert!(seconds >= 1, "Retry-After {seconds}");

    // Another tenant, with no limit and with a limit of its own, is unaffected.
    for _ in 0..20 {
        let answer = server
            .call(Method::GET, "/v1/queues", &tenant_token("free"), None)
            .await;
        assert_eq!(answer.0, 200, "{}", answer.1);
    }
    create_tenant(
        &server,
        "other",
        json!({"requests_per_second": 5, "burst": 5}),
    )
    .await;
    assert_eq!(
        server
            .call(Method::GET, "/v1/queues", &tenant_token("other"), None)
            .await
            .0,
        200
    );

    // The admin API is never limited. (A token naming the limited tenant and admin both is
    // refused outright: admin tokens name no tenant.)
    let admin = token(None, "admin");
    for _ in 0..20 {
        let answer = server
            .call(Method::GET, "/v1/admin/tenants", &admin, None)
            .await;
        assert_eq!(answer.0, 200, "{}", answer.1);
    }

    // Lifting the limit takes effect on the next request.
    let lifted = server
        .call(
            Method::PATCH,
            "/v1/admin/tenants/limited",
            &token(None, "admin"),
            Some(json!({"quotas": {}})),
        )
        .await;
    assert_eq!(lifted.0, 200, "{}", lifted.1);
    for _ in 0..20 {
        let answer = server.call(Method::GET, "/v1/queues", &limited, None).await;
        assert_eq!(answer.0, 200, "{}", answer.1);
    }
}

#[tokio::test]
async fn refused_requests_spend_tokens_and_bad_tokens_spend_none() {
    let server = Server::start();
    // One token a second: the test's few requests are far quicker than a refill.
    create_tenant(
        &server,
        "spender",
        json!({"requests_per_second": 1, "burst": 3}),
    )
    .await;
    let t = tenant_token("spender");
    // Bad tokens name no tenant: they spend nothing.
    let forged = crate::harness::token_with(
        Some("spender"),
        "queues:manage",
        crate::harness::now_seconds() + 3600,
        "another-secret-that-is-long-enough-0123456789",
    );
    assert_ne!(SECRET, "another-secret-that-is-long-enough-0123456789");
    for _ in 0..5 {
        let answer = server.call(Method::GET, "/v1/queues", &forged, None).await;
        assert_error(&answer, 401, "Unauthenticated");
    }
    // Three refused requests (a missing queue, a bad name, a missing scope) spend the burst.
    assert_error(
        &server
            .call(Method::GET, "/v1/queues/missing", &t, None)
            .await,
        404,
        "QueueNotFound",
    );
    assert_error(
        &server
            .call(Method::GET, "/v1/queues/bad%20name", &t, None)
            .await,
        400,
        "ValidationError",
    );
    let send_only = token(Some("spender"), "messages:send");
    assert_error(
        &server
            .call(Method::PUT, "/v1/queues/q", &send_only, None)
            .await,
        403,
        "Forbidden",
    );
    assert_error(
        &server.call(Method::GET, "/v1/queues", &t, None).await,
        429,
        "RateLimited",
    );
}

#[tokio::test]
async fn quota_fields_are_validated_naming_the_field_and_changing_nothing() {
    let server = Server::start();
    let admin = token(None, "admin");
    let cases = [
        (json!({"burst": 5}), "quotas.burst"),
        (
            json!({"requests_per_second": 0}),
            "quotas.requests_per_second",
        ),
        (
            json!({"requests_per_second": 5, "burst": 0}),
            "quotas.burst",
        ),
        (json!({"requests_per_second": -1}), "requests_per_second"),
        (json!({"requests_per_second": 5, "burst": -2}), "burst"),
    ];
    for (quotas, field) in &cases {
        let answer = server
            .call(
                Method::POST,
                "/v1/admin/tenants",
                &admin,
                Some(json!({"id": "bad", "quotas": quotas})),
            )
            .await;
        assert_eq!(answer.0, 400, "{quotas}: {}", answer.1);
        let message = answer.1["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{quotas}: {message}");
    }
    assert_error(
        &server
            .call(Method::GET, "/v1/admin/tenants/bad", &admin, None)
            .await,
        404,
        "TenantNotFound",
    );

    create_tenant(
        &server,
        "kept",
        json!({"requests_per_second": 5, "burst": 7}),
    )
    .await;
    for (quotas, field) in &cases {
        let answer = server
            .call(
                Method::PATCH,
                "/v1/admin/tenants/kept",
                &admin,
                Some(json!({"quotas": quotas})),
            )
            .await;
        assert_eq!(answer.0, 400, "{quotas}: {}", answer.1);
        let message = answer.1["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{quotas}: {message}");
    }
    let (status, kept) = server
        .call(Method::GET, "/v1/admin/tenants/kept", &admin, None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(kept["quotas"]["requests_per_second"], 5, "{kept}");
    assert_eq!(kept["quotas"]["burst"], 7, "{kept}");
}

/// Two gateways on one Redis, four clients each far above the rate for about three seconds:
/// together they admit the tenant's rate × time + burst, within 20% (two buckets of their own
/// would admit about twice that).
#[tokio::test]
async fn two_gateways_on_one_redis_share_the_tenants_bucket() {
    let redis = RedisServer::start().unwrap();
    let store = redis.url();
    let prefix = unique_prefix("e2e-rate");
    let start_gateway = || {
        let (dir, server) = crate::harness::redis_gateway(&store, &prefix, &[]);
        (dir, Arc::new(server))
    };
    let (_a_dir, a) = start_gateway();
    let (_b_dir, b) = start_gateway();
    create_tenant(
        &a,
        "shared",
        json!({"requests_per_second": 20, "burst": 20}),
    )
    .await;
    let t = tenant_token("shared");
    let admitted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let run_for = Duration::from_secs(3);
    let started = Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for n in 0..8 {
        let server = Arc::clone(if n % 2 == 0 { &a } else { &b });
        let (t, admitted, refused) = (t.clone(), admitted.clone(), refused.clone());
        clients.spawn(async move {
            // 100 requests a second per client, 800 in all: forty times the rate.
            let mut pace = tokio::time::interval(Duration::from_millis(10));
            while started.elapsed() < run_for {
                pace.tick().await;
                let answer = server.call(Method::GET, "/v1/queues", &t, None).await;
                match answer.0 {
                    200 => admitted.fetch_add(1, Ordering::Relaxed),
                    _ => {
                        assert_error(&answer, 429, "RateLimited");
                        refused.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        });
    }
    while let Some(done) = clients.join_next().await {
        done.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let admitted = admitted.load(Ordering::Relaxed) as f64;
    let expected = 20.0 * elapsed + 20.0;
    assert!(
        refused.load(Ordering::Relaxed) > 0,
        "the clients never exceeded the rate"
    );
    assert!(
        (admitted - expected).abs() <= 0.2 * expected,
        "admitted {admitted} in {elapsed:.2} s; expected about {expected:.0}"
    );
}
