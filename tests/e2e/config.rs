//! Configuration layering (flags > environment > file > defaults), start-up errors that name
//! the setting, development mode, and `sluice token`.

use crate::harness::{binary, tenant_token, Server};
use reqwest::Method;
use std::process::{Command, Stdio};

fn start_error(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(binary());
    command
        .arg("serve")
        .args(["--data-dir", dir.path().to_str().unwrap()])
        .args(args)
        .env_remove("SLUICE_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    assert!(!output.status.success(), "{args:?} should not start");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn invalid_settings_stop_start_up_naming_the_setting() {
    assert!(start_error(&["--listen", "nowhere"], &[]).contains("listen"));
    assert!(start_error(&["--jwt-secret", "short"], &[]).contains("jwt_secret"));
    assert!(start_error(&["--max-message-bytes", "10"], &[]).contains("max_message_bytes"));
    assert!(start_error(&["--max-in-flight-requests", "0"], &[]).contains("max_in_flight_requests"));
    assert!(start_error(&[], &[("SLUICE_MAX_WAITING_POLLS", "0")]).contains("max_waiting_polls"));
    assert!(start_error(&["--max-body-bytes-in-flight", "1000"], &[])
        .contains("max_body_bytes_in_flight"));
    assert!(start_error(&[], &[("SLUICE_MAX_MESSAGE_BYTES", "abc")]).contains("max-message-bytes"));
    assert!(start_error(
        &[
            "--jwt-public-key",
            "/nonexistent.pem",
            "--jwt-algorithm",
            "EdDSA"
        ],
        &[]
    )
    .contains("jwt_public_key"));
    assert!(start_error(&["--jwt-public-key", "/nonexistent.pem"], &[]).contains("jwt_algorithm"));
    assert!(start_error(&["--public-url", "queues.example.com"], &[]).contains("public_url"));
    assert!(start_error(&[], &[("SLUICE_PUBLIC_URL", "https://")]).contains("public_url"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sluice.toml");
    std::fs::write(&file, "listen = \"127.0.0.1:0\"\nlisen = \"typo\"\n").unwrap();
    let message = start_error(&["--config", file.to_str().unwrap()], &[]);
    assert!(
        message.contains("config") && message.contains("lisen"),
        "{message}"
    );
}

#[tokio::test]
async fn file_environment_and_flags_layer_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sluice.toml");
    // The file asks for a secret and a port that the environment and the flag override.
    std::fs::write(
        &file,
        "listen = \"127.0.0.1:1\"\njwt_secret = \"file-secret-file-secret-file-secret-0000\"\nmax_message_bytes = 4096\n",
    )
    .unwrap();
    let mut command = Command::new(binary());
    command
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            dir.path().join("data").to_str().unwrap(),
        ])
        .env("SLUICE_CONFIG", &file)
        .env("SLUICE_JWT_SECRET", crate::harness::SECRET)
        .env("SLUICE_LOG", "warn")
        .stdout(Stdio::piped());
    let server = Server::spawn(command);
    let t = tenant_token("acme");
    let (status, queue) = server.call(Method::PUT, "/v1/queues/q", &t, None).await;
    assert_eq!(
        status, 201,
        "the environment's secret wins over the file's: {queue}"
    );
    assert_eq!(
        queue["config"]["max_message_bytes"], 4096,
        "the file's maximum applies"
    );
}

#[tokio::test]
async fn development_mode_keeps_a_key_and_sluice_token_uses_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start_in(&data, &[]);
    assert!(data.join("jwt-secret").exists());
    let minted = Command::new(binary())
        .args([
            "token",
            "--tenant",
            "dev",
            "--scopes",
            "queues:manage",
            "--data-dir",
            data.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        minted.status.success(),
        "{}",
        String::from_utf8_lossy(&minted.stderr)
    );
    let token = String::from_utf8(minted.stdout).unwrap().trim().to_owned();
    assert_eq!(
        server
            .call(Method::PUT, "/v1/queues/q", &token, None)
            .await
            .0,
        201
    );
    // A token signed with any other key is refused.
    assert_eq!(
        server
            .call(Method::GET, "/v1/queues", &tenant_token("dev"), None)
            .await
            .0,
        401
    );
}

#[test]
fn development_mode_prints_tokens_and_a_curl_example() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(binary())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            dir.path().to_str().unwrap(),
        ])
        .env_remove("SLUICE_CONFIG")
        .env_remove("SLUICE_JWT_SECRET")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let mut seen = String::new();
    for _ in 0..11 {
        seen.push_str(&lines.next().unwrap().unwrap());
        seen.push('\n');
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        seen.starts_with("sluice listening on http://127.0.0.1:"),
        "{seen}"
    );
    assert!(seen.contains("admin token:"), "{seen}");
    assert!(seen.contains("tenant 'default' token:"), "{seen}");
    assert!(seen.contains("curl"), "{seen}");
    let address = seen
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("sluice listening on "))
        .unwrap();
    assert!(
        seen.contains(&format!("dashboard:     {address}/dashboard")),
        "{seen}"
    );
}
