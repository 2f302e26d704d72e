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

/// Every operation of the spec: (method, path, operation).
fn operations(spec: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for (path, item) in spec["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            out.push((method.clone(), path.clone(), operation.clone()));
        }
    }
    out
}

/// Follows a local `$ref` (one level is all the spec uses).
fn resolve<'a>(spec: &'a Value, value: &'a Value) -> &'a Value {
    match value["$ref"].as_str() {
        Some(target) => spec
            .pointer(target.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("$ref {target} does not resolve")),
        None => value,
    }
}

fn has_text(value: &Value, key: &str) -> bool {
    value[key]
        .as_str()
        .is_some_and(|text| !text.trim().is_empty())
}

#[test]
fn every_response_parameter_and_schema_is_described() {
    let spec: Value = serde_json::from_str(&generated()).unwrap();
    let mut missing = Vec::new();
    for (method, path, operation) in operations(&spec) {
        if !has_text(&operation, "summary") {
            missing.push(format!("{method} {path}: summary"));
        }
        for (status, response) in operation["responses"].as_object().expect("responses") {
            if !has_text(resolve(&spec, response), "description") {
                missing.push(format!("{method} {path} → {status}: description"));
            }
        }
        for parameter in operation["parameters"].as_array().into_iter().flatten() {
            if !has_text(parameter, "description") {
                missing.push(format!("{method} {path} parameter {}", parameter["name"]));
            }
        }
    }
    for (name, response) in spec["components"]["responses"]
        .as_object()
        .into_iter()
        .flatten()
    {
        if !has_text(response, "description") {
            missing.push(format!("response {name}"));
        }
    }
    for (name, schema) in spec["components"]["schemas"].as_object().expect("schemas") {
        if !has_text(schema, "description") {
            missing.push(format!("schema {name}"));
        }
        for (field, property) in schema["properties"].as_object().into_iter().flatten() {
            // utoipa puts a nullable reference's description on the reference inside `oneOf`;
            // a bare `$ref` takes its description from the target.
            let members = property["oneOf"].as_array().into_iter().flatten();
            let described = has_text(property, "description")
                || has_text(resolve(&spec, property), "description")
                || members
                    .into_iter()
                    .any(|member| has_text(member, "description"));
            if !described {
                missing.push(format!("schema {name}.{field}"));
            }
        }
    }
    for tag in spec["tags"].as_array().expect("tags") {
        if !has_text(tag, "description") {
            missing.push(format!("tag {}", tag["name"]));
        }
    }
    assert!(missing.is_empty(), "undescribed: {missing:#?}");
}

/// Generated clients name their methods after these: changing one breaks every client, so the
/// list is spelled out here and a change to it is deliberate.
#[test]
fn operation_ids_are_unique_readable_and_stable() {
    let spec: Value = serde_json::from_str(&generated()).unwrap();
    let mut ids: Vec<String> = operations(&spec)
        .into_iter()
        .map(|(method, path, operation)| {
            let id = operation["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{method} {path} has no operationId"))
                .to_owned();
            assert!(
                !id.is_empty()
                    && id.starts_with(|c: char| c.is_ascii_lowercase())
                    && id.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{method} {path}: operationId {id:?} is not snake_case"
            );
            id
        })
        .collect();
    ids.sort();
    let count = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), count, "operationIds repeat: {ids:?}");
    assert_eq!(
        ids,
        [
            "cancel_redrive_task",
            "change_message_visibility",
            "change_message_visibility_batch",
            "check_health",
            "check_readiness",
            "create_access_key",
            "create_tenant",
            "dead_letter_message",
            "delete_access_key",
            "delete_message",
            "delete_message_batch",
            "delete_queue",
            "delete_tenant",
            "delete_topic",
            "get_metrics",
            "get_queue",
            "get_redrive_task",
            "get_subscription",
            "get_tenant",
            "get_topic",
            "list_access_keys",
            "list_queues",
            "list_redrive_tasks",
            "list_subscriptions",
            "list_tenants",
            "list_topics",
            "mint_tenant_token",
            "patch_queue",
            "patch_subscription",
            "peek_messages",
            "publish_message",
            "publish_message_batch",
            "purge_queue",
            "put_queue",
            "put_topic",
            "receive_messages",
            "send_message",
            "send_message_batch",
            "start_redrive",
            "subscribe",
            "unsubscribe",
            "update_tenant",
        ],
        "operation ids changed: a new operation adds its id here; renaming one breaks clients"
    );
}

/// Every error answer of a `/v1` operation has the one shape, `ErrorBody`, and every `/v1`
/// operation documents the answers of its bearer token (401, 403).
#[test]
fn error_responses_share_error_body() {
    let spec: Value = serde_json::from_str(&generated()).unwrap();
    for (method, path, operation) in operations(&spec) {
        let responses = operation["responses"].as_object().expect("responses");
        if path.starts_with("/v1/") {
            for status in ["400", "401", "403"] {
                assert!(
                    responses.contains_key(status),
                    "{method} {path} lacks {status}"
                );
            }
            assert!(
                operation["security"][0]["bearer"].is_array(),
                "{method} {path} names its security"
            );
        }
        for (status, response) in responses {
            // The probes' 503 carries `Health`; every other error answer is an `ErrorBody`.
            let is_error = status.starts_with('4') || status.starts_with('5');
            if !is_error || !path.starts_with("/v1/") {
                continue;
            }
            let schema = &resolve(&spec, response)["content"]["application/json"]["schema"];
            assert_eq!(
                schema["$ref"], "#/components/schemas/ErrorBody",
                "{method} {path} → {status}"
            );
        }
    }
}
