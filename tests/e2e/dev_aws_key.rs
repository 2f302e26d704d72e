//! Development mode's AWS key pair against the real binary: `sluice serve` without a signing
//! key prints a ready-to-paste `export AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=...
//! AWS_DEFAULT_REGION=...` line for the `default` tenant (account `000000000000`); requests
//! signed with it (by `aws-sigv4`, and by the aws CLI where installed) work at once, and a
//! restart on the same data folder prints and accepts the same pair without storing another.

use crate::aws_identity::{run_tool_with, signed_request};
use crate::harness::{binary, Server};
use reqwest::Method;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::SystemTime;

const JSON: &str = "application/x-amz-json-1.0";

/// What a development-mode start printed.
struct DevStart {
    server: Server,
    key_id: String,
    secret: String,
    region: String,
    admin_token: String,
}

/// `sluice serve` in development mode (no key configured) on `data_dir`.
fn start_dev(data_dir: &Path) -> DevStart {
    let mut command = Command::new(binary());
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .env_remove("SLUICE_CONFIG")
        .env_remove("SLUICE_JWT_SECRET")
        .env("SLUICE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    // The block ends with the example `aws ... sqs list-queues` line.
    let (server, printed) = Server::spawn_reading(command, |line| line.contains("list-queues"));
    let text = printed.join("\n");
    let export = printed
        .iter()
        .filter_map(|line| line.trim().strip_prefix("export "))
        .find(|line| line.starts_with("AWS_ACCESS_KEY_ID="))
        .unwrap_or_else(|| panic!("no export line for the AWS key pair in:\n{text}"));
    let var = |name: &str| {
        export
            .split(' ')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("{name} missing from {export:?}"))
            .to_owned()
    };
    let admin_token = printed
        .iter()
        .find_map(|line| line.strip_prefix("admin token:"))
        .unwrap_or_else(|| panic!("no admin token in:\n{text}"))
        .trim()
        .to_owned();
    // The example the user is told to paste, for this server.
    assert!(
        text.contains(&format!(
            "aws --endpoint-url {} sqs list-queues",
            server.base
        )),
        "{text}"
    );
    assert!(text.contains("account 000000000000"), "{text}");
    DevStart {
        key_id: var("AWS_ACCESS_KEY_ID"),
        secret: var("AWS_SECRET_ACCESS_KEY"),
        region: var("AWS_DEFAULT_REGION"),
        admin_token,
        server,
    }
}

impl DevStart {
    /// An SQS JSON request for `action`, signed with the printed pair.
    async fn sqs(&self, action: &str, body: &str) -> (u16, Value) {
        let answer = signed_request(
            &self.server,
            (&self.key_id, &self.secret),
            "sqs",
            "/",
            &[
                ("content-type", JSON),
                ("x-amz-target", &format!("AmazonSQS.{action}")),
            ],
            body,
            SystemTime::now(),
        )
        .await;
        let json = serde_json::from_str(&answer.text).unwrap_or(Value::Null);
        (answer.status, json)
    }

    async fn queue_urls(&self) -> Vec<String> {
        let (status, answer) = self.sqs("ListQueues", "{}").await;
        assert_eq!(status, 200, "{answer}");
        answer["QueueUrls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|u| u.as_str().unwrap().to_owned())
            .collect()
    }

    async fn default_tenant_key_ids(&self) -> Vec<String> {
        let (status, answer) = self
            .server
            .call(
                Method::GET,
                "/v1/admin/tenants/default/access-keys",
                &self.admin_token,
                None,
            )
            .await;
        assert_eq!(status, 200, "{answer}");
        let keys = answer["access_keys"]
            .as_array()
            .unwrap_or_else(|| panic!("no key list in {answer}"));
        keys.iter()
            .map(|k| k["access_key_id"].as_str().unwrap().to_owned())
            .collect()
    }
}

#[tokio::test]
async fn the_printed_pair_works_at_once_and_stays_the_same_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = start_dev(dir.path());
    assert!(first.key_id.starts_with("AKIA"), "{}", first.key_id);
    assert_eq!(first.secret.len(), 40, "{}", first.secret);
    assert_eq!(first.region, "us-east-1");

    let (status, created) = first.sqs("CreateQueue", r#"{"QueueName":"orders"}"#).await;
    assert_eq!(status, 200, "{created}");
    let url = format!("{}/000000000000/orders", first.server.base);
    assert_eq!(created["QueueUrl"], url.as_str(), "{created}");
    assert_eq!(first.queue_urls().await, vec![url.clone()]);
    // The queue is the `default` tenant's, the one the printed token reaches over REST.
    assert_eq!(
        first.default_tenant_key_ids().await,
        vec![first.key_id.clone()]
    );

    // The aws CLI, as the start-up message suggests (where installed).
    let endpoint = first.server.base.clone();
    let (pair, region) = (
        (first.key_id.clone(), first.secret.clone()),
        first.region.clone(),
    );
    let cli = tokio::task::spawn_blocking(move || {
        run_tool_with(
            "aws",
            &[
                "--endpoint-url",
                &endpoint,
                "sqs",
                "list-queues",
                "--output",
                "json",
            ],
            (&pair.0, &pair.1),
            &[("AWS_DEFAULT_REGION", &region)],
        )
    })
    .await
    .unwrap();
    match cli {
        Some(output) => {
            assert!(
                output.status.success(),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
            let listed: Value = serde_json::from_slice(&output.stdout).unwrap();
            assert_eq!(listed["QueueUrls"][0], url.as_str(), "{listed}");
        }
        None => eprintln!("skipped: the aws CLI is not installed"),
    }

    assert!(first.server.terminate().await.success());
    let again = start_dev(dir.path());
    assert_eq!(
        (&again.key_id, &again.secret, &again.region),
        (&first.key_id, &first.secret, &first.region)
    );
    assert_eq!(
        again.queue_urls().await,
        vec![format!("{}/000000000000/orders", again.server.base)]
    );
    // Restarting stores no second key.
    assert_eq!(
        again.default_tenant_key_ids().await,
        vec![again.key_id.clone()]
    );

    // Another data folder is another development key: the first pair means nothing there.
    let other_dir = tempfile::tempdir().unwrap();
    let other = start_dev(other_dir.path());
    assert_ne!(other.key_id, first.key_id);
    let stale = signed_request(
        &other.server,
        (&first.key_id, &first.secret),
        "sqs",
        "/",
        &[
            ("content-type", JSON),
            ("x-amz-target", "AmazonSQS.ListQueues"),
        ],
        "{}",
        SystemTime::now(),
    )
    .await;
    assert_eq!(stale.status, 403, "{}", stale.text);
    assert!(
        stale.text.contains("InvalidClientTokenId"),
        "{}",
        stale.text
    );
}
