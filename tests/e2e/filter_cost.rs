//! A filter policy cannot stall other tenants: the pathological body-scope policy (a key of
//! 20,000 dots beside an `$or` of four branches) against an 80 KB body of 20,000 empty
//! objects once took ~38 s per publish on the async workers, holding a third tenant's plain
//! send for half a minute. Now each publish is quick and a concurrent send stays fast.

use crate::harness::{tenant_token, Server};
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

async fn call(server: &Server, t: &str, method: Method, path: &str, body: Option<Value>) -> Value {
    let (status, answer) = server.call(method, path, t, body).await;
    assert!(status < 300, "{path}: {status} {answer}");
    answer
}

#[tokio::test]
async fn a_pathological_policy_neither_stalls_its_publish_nor_other_tenants() {
    let server = Server::start();
    let dots = ".".repeat(20_000);
    let or: Vec<Value> = (0..4).map(|i| json!({ format!("b{i}"): [1] })).collect();
    let policy = json!({ &dots: [1], "$or": or });
    let objects = vec!["{}"; 20_000].join(",");
    let body = format!(r#"{{"": [{objects}], "b0": 1}}"#);
    for tenant in ["slow1", "slow2"] {
        let t = tenant_token(tenant);
        call(&server, &t, Method::PUT, "/v1/queues/q", None).await;
        call(&server, &t, Method::PUT, "/v1/topics/t", None).await;
        let subscription =
            json!({"queue": "q", "filter_policy_scope": "body", "filter_policy": policy});
        call(
            &server,
            &t,
            Method::POST,
            "/v1/topics/t/subscriptions",
            Some(subscription),
        )
        .await;
    }
    let plain = tenant_token("plain");
    call(&server, &plain, Method::PUT, "/v1/queues/q", None).await;

    let publisher = |tenant: &'static str| {
        let (server, body) = (&server, body.clone());
        async move {
            let t = tenant_token(tenant);
            let mut slowest = Duration::ZERO;
            for _ in 0..3 {
                let started = Instant::now();
                let path = "/v1/topics/t/messages";
                call(
                    server,
                    &t,
                    Method::POST,
                    path,
                    Some(json!({ "body": body.clone() })),
                )
                .await;
                slowest = slowest.max(started.elapsed());
            }
            slowest
        }
    };
    let sender = async {
        let mut slowest = Duration::ZERO;
        for i in 0..10 {
            let started = Instant::now();
            let send = json!({ "body": format!("plain {i}") });
            call(
                &server,
                &plain,
                Method::POST,
                "/v1/queues/q/messages",
                Some(send),
            )
            .await;
            slowest = slowest.max(started.elapsed());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        slowest
    };
    let (first, second, send) = tokio::join!(publisher("slow1"), publisher("slow2"), sender);
    println!("slowest publishes {first:?} and {second:?}; slowest plain send {send:?}");
    assert!(
        first.max(second) < Duration::from_secs(1),
        "{first:?} {second:?}"
    );
    assert!(send < Duration::from_millis(500), "{send:?}");
}
