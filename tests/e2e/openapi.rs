//! The OpenAPI document: the committed copy matches the code, every `$ref` resolves, and the
//! served copy and the reference page work offline.

use crate::harness::Server;
use serde_json::Value;
use sluice_gateway::app::ApiDoc;
use utoipa::OpenApi;

const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi/openapi.json");

fn generated() -> String {
    let mut text = ApiDoc::openapi().to_pretty_json().unwrap();
    text.push('\n');
    text
}

#[test]
fn committed_spec_is_current() {
    let fresh = generated();
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(COMMITTED, &fresh).unwrap();
    }
    let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
    assert!(
        committed == fresh,
        "openapi/openapi.json is stale: run `UPDATE_OPENAPI=1 cargo test -p sluice-gateway --test e2e openapi` and commit it"
    );
}

fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                if key == "$ref" {
                    if let Some(target) = inner.as_str() {
                        out.push(target.to_owned());
                    }
                }
                collect_refs(inner, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| collect_refs(item, out)),
        _ => {}
    }
}

#[test]
fn every_ref_resolves() {
    let spec: Value = serde_json::from_str(&generated()).unwrap();
    let mut refs = Vec::new();
    collect_refs(&spec, &mut refs);
    assert!(refs.len() > 20, "the spec uses component schemas");
    for target in refs {
        let pointer = target
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("external $ref {target}"));
        assert!(
            spec.pointer(pointer).is_some(),
            "$ref {target} does not resolve"
        );
    }
    for path in [
        "/v1/queues",
        "/v1/queues/{queue}",
        "/v1/queues/{queue}/purge",
        "/v1/queues/{queue}/messages",
        "/v1/queues/{queue}/messages/batch",
        "/v1/queues/{queue}/messages/receive",
        "/v1/queues/{queue}/messages/delete",
        "/v1/queues/{queue}/messages/visibility",
        "/v1/queues/{queue}/messages/{receipt_handle}",
        "/v1/admin/tenants",
        "/v1/admin/tenants/{id}",
        "/v1/admin/tenants/{id}/tokens",
        "/healthz",
        "/readyz",
    ] {
        assert!(spec["paths"][path].is_object(), "{path} is documented");
    }
}

#[tokio::test]
async fn served_spec_and_reference_page() {
    let server = Server::start();
    let served: Value = server
        .client
        .get(server.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let committed: Value = serde_json::from_str(&generated()).unwrap();
    assert_eq!(served, committed);
    let page = server
        .client
        .get(server.url("/docs/"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("swagger-ui"), "{html}");
    assert!(
        !html.contains("https://"),
        "the page loads nothing from outside"
    );
    let script = server
        .client
        .get(server.url("/docs/swagger-ui-bundle.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(script.status(), 200);
}
