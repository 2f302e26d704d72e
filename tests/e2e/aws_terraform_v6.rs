//! The current Terraform AWS provider's (v6) calls for `aws_sqs_queue`,
//! `aws_sqs_queue_redrive_policy`, `aws_sns_topic` and `aws_sns_topic_subscription`, replayed
//! with boto3 against the real binary (`aws_terraform_v6.py`): apply, a second plan that must
//! find no diff, an update and destroy, each wait-for-echo read reaching its target at the first
//! read. No v6 provider binary is available to the tests; `tests/terraform/run.sh` applies the
//! modules with the 3.39 provider.

use crate::aws_identity::{account_of, create_key, create_tenant, run_tool_with};
use crate::harness::Server;
use serde_json::json;

/// Skipped with a note where python3 or boto3 is missing, as `tests/run.sh` installs them.
#[tokio::test]
async fn the_v6_provider_call_sequence_converges_at_the_first_read() {
    let server = Server::start();
    let (status, tenant) = create_tenant(&server, json!({ "id": "tf6" })).await;
    assert_eq!(status, 201, "{tenant}");
    let scopes = [
        "queues:manage",
        "messages:send",
        "messages:consume",
        "topics:manage",
        "topics:publish",
    ];
    let (status, key) = create_key(&server, "tf6", json!({ "scopes": scopes })).await;
    assert_eq!(status, 201, "{key}");
    let pair = (
        key["access_key_id"].as_str().unwrap().to_owned(),
        key["secret_access_key"].as_str().unwrap().to_owned(),
    );
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/e2e/aws_terraform_v6.py"
    );
    let endpoint = server.base.clone();
    let account = account_of(&tenant);
    let output = tokio::task::spawn_blocking(move || {
        run_tool_with(
            "python3",
            &[script],
            (&pair.0, &pair.1),
            &[("SLUICE_ENDPOINT", &endpoint), ("SLUICE_ACCOUNT", &account)],
        )
    })
    .await
    .unwrap();
    let Some(output) = output else {
        eprintln!("skipped: python3 is not installed");
        return;
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() && stderr.contains("No module named 'boto3'") {
        eprintln!("skipped: boto3 is not installed");
        return;
    }
    println!("{stdout}");
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("result: 4 passed; 0 failed"), "{stdout}");
    // The current botocore speaks SQS's JSON protocol, as the v6 provider does.
    assert!(
        stdout.contains("(json protocol for SQS, query for SNS)"),
        "{stdout}"
    );
}
