//! The README's curl walk-through works exactly as written (against a server on a free port).

use crate::harness::{binary, Server};
use std::process::Command;

#[test]
fn readme_walkthrough_runs() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let block = readme
        .split("<!-- walkthrough:start -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- walkthrough:end -->").next())
        .expect("README marks its walk-through");
    let script: String = block
        .lines()
        .filter(|line| !line.starts_with("```"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(script.contains("SLUICE=http://127.0.0.1:8080"));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start_in(&data, &[]);
    // Only the address and the way the binary is invoked differ from what a reader runs.
    let script = script
        .replace(
            "SLUICE=http://127.0.0.1:8080",
            &format!("SLUICE={}", server.base),
        )
        .replace(
            "cargo run -q --release -- token",
            &format!("{} token --data-dir {}", binary(), data.display()),
        );
    let output = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the walk-through failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("\"body\":\"order 1\""), "{stdout}");
    assert!(stdout.contains("\"visible\":"), "{stdout}");
}
