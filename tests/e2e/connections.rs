//! Connection hardening, over raw sockets: header, idle and body timeouts, the connection limit
//! and its log line, the file-descriptor limit raised at start, long polls outliving the idle
//! timeout, and what a stop does: requests in flight finish, live streams end, the drain delay
//! keeps the listener open while readiness fails.

use crate::harness::{binary, tenant_token, Server, SECRET};
use reqwest::Method;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::timeout;

/// A server with `extra` flags whose log lines (at `log` level) arrive on the receiver.
fn start_logged(extra: &[&str], log: &str) -> (Server, mpsc::UnboundedReceiver<String>) {
    let temp = tempfile::tempdir().unwrap();
    let mut command = Command::new(binary());
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--jwt-secret", SECRET])
        .arg("--data-dir")
        .arg(temp.path())
        .args(extra)
        .env_remove("SLUICE_CONFIG")
        .env("SLUICE_LOG", log);
    spawn_logged(command, temp)
}

fn spawn_logged(
    mut command: Command,
    temp: tempfile::TempDir,
) -> (Server, mpsc::UnboundedReceiver<String>) {
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut server = Server::spawn(command);
    // The data folder lives as long as the server does.
    std::mem::forget(temp);
    let stderr = server.child.stderr.take().unwrap();
    let (lines_tx, lines_rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("sluice: {line}");
            let _ = lines_tx.send(line);
        }
    });
    (server, lines_rx)
}

/// The first log line containing `needle`, waiting at most 10 s for it.
async fn await_line(lines: &mut mpsc::UnboundedReceiver<String>, needle: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, lines.recv()).await {
            Ok(Some(line)) if line.contains(needle) => return line,
            Ok(Some(_)) => {}
            Ok(None) => panic!("the server's log ended before {needle:?}"),
            Err(_) => panic!("no log line with {needle:?} within 10 s"),
        }
    }
}

fn addr(server: &Server) -> String {
    server.base.trim_start_matches("http://").to_owned()
}

/// Reads one response: its head, then as many body bytes as its content-length says.
async fn read_response(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&received).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if received.len() >= end + 4 + length {
                return text;
            }
        }
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the connection closed mid-response: {text:?}");
        received.extend_from_slice(&chunk[..n]);
    }
}

async fn healthz_on(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: sluice\r\n\r\n")
        .await
        .unwrap();
    read_response(stream).await
}

/// Waits for the server to close `stream` (end of file or reset), at most `within`; answers
/// what it sent before closing.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> String {
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    let read_to_end = async {
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&chunk[..n]),
            }
        }
    };
    timeout(within, read_to_end)
        .await
        .unwrap_or_else(|_| panic!("the server kept the connection open past {within:?}"));
    String::from_utf8_lossy(&received).into_owned()
}

#[tokio::test]
async fn a_slow_header_client_is_disconnected_after_the_header_timeout() {
    let (server, _lines) = start_logged(
        &[
            "--header-timeout-seconds",
            "1",
            "--idle-timeout-seconds",
            "30",
        ],
        "warn",
    );
    let start = Instant::now();
    let stream = TcpStream::connect(addr(&server)).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    // One byte every 200 ms of a head that never ends: each byte is progress, none completes it.
    let trickle = tokio::spawn(async move {
        let head = b"GET /healthz HTTP/1.1\r\nHost: sluice\r\n";
        let padding = b"X-Padding: slow\r\n".iter().cycle();
        for byte in head.iter().chain(padding) {
            if write.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let mut chunk = [0u8; 1024];
    let answer = timeout(Duration::from_secs(10), read.read(&mut chunk))
        .await
        .expect("the server kept the slow connection open past 10 s");
    let elapsed = start.elapsed();
    assert!(matches!(answer, Ok(0) | Err(_)), "{answer:?}");
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(4),
        "closed after {elapsed:?}, expected about 1 s"
    );
    trickle.abort();
    // The server itself is unharmed.
    assert_eq!(server.probe("/healthz").await, 200);
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let (server, _lines) = start_logged(
        &[
            "--idle-timeout-seconds",
            "1",
            "--header-timeout-seconds",
            "30",
        ],
        "warn",
    );
    let mut stream = TcpStream::connect(addr(&server)).await.unwrap();
    assert!(healthz_on(&mut stream).await.starts_with("HTTP/1.1 200"));
    // Still usable right away: keep-alive works.
    assert!(healthz_on(&mut stream).await.starts_with("HTTP/1.1 200"));
    let idle_from = Instant::now();
    let sent = closed_within(&mut stream, Duration::from_secs(10)).await;
    let elapsed = idle_from.elapsed();
    assert_eq!(
        sent, "",
        "nothing is sent on an idle connection before closing it"
    );
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(4),
        "closed after {elapsed:?}, expected about 1 s (the idle timeout, not the 30 s header one)"
    );
}

#[tokio::test]
async fn an_unfinished_batch_body_answers_408_after_the_body_timeout() {
    let (server, _lines) = start_logged(&["--body-timeout-seconds", "1"], "warn");
    let t = tenant_token("acme");
    assert_eq!(
        server.call(Method::PUT, "/v1/queues/q", &t, None).await.0,
        201
    );
    let mut stream = TcpStream::connect(addr(&server)).await.unwrap();
    let head = format!(
        "POST /v1/queues/q/messages/batch HTTP/1.1\r\nHost: sluice\r\nAuthorization: Bearer {t}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let start = Instant::now();
    stream
        .write_all(br#"{"entries": [{"id": "a", "body": ""#)
        .await
        .unwrap();
    stream.write_all(&[b'x'; 64 * 1024]).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    // Then a trickle: a deadline on the whole body, not on each read, is what stops it.
    let trickle = tokio::spawn(async move {
        loop {
            if write.write_all(b"x").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut received = Vec::new();
    let read_to_end = async {
        let mut chunk = [0u8; 4096];
        loop {
            match read.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&chunk[..n]),
            }
        }
    };
    timeout(Duration::from_secs(10), read_to_end)
        .await
        .expect("no answer and no close within 10 s of an unfinished body");
    let elapsed = start.elapsed();
    trickle.abort();
    let answer = String::from_utf8_lossy(&received);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"code\":\"RequestTimeout\""), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(4),
        "answered after {elapsed:?}, expected about 1 s"
    );
    // Nothing of the unfinished batch was sent.
    let (status, queue) = server.call(Method::GET, "/v1/queues/q", &t, None).await;
    assert_eq!(status, 200);
    assert_eq!(queue["stats"]["visible"], 0, "{queue}");
}

#[tokio::test]
async fn past_the_connection_limit_new_connections_wait_and_open_ones_keep_answering() {
    let (server, mut lines) = start_logged(
        &[
            "--max-connections",
            "2",
            "--idle-timeout-seconds",
            "30",
            "--header-timeout-seconds",
            "30",
        ],
        "info",
    );
    let bounds = await_line(&mut lines, "connection bounds").await;
    assert!(bounds.contains("max_connections 2,"), "{bounds}");
    let mut a = TcpStream::connect(addr(&server)).await.unwrap();
    assert!(healthz_on(&mut a).await.starts_with("HTTP/1.1 200"));
    let mut b = TcpStream::connect(addr(&server)).await.unwrap();
    assert!(healthz_on(&mut b).await.starts_with("HTTP/1.1 200"));
    // Both slots are held: the server says so, once.
    let warning = await_line(&mut lines, "connection limit reached").await;
    assert!(warning.contains("WARN"), "{warning}");
    // A third connection completes in the kernel's backlog but is not served...
    let mut c = TcpStream::connect(addr(&server)).await.unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: sluice\r\n\r\n")
        .await
        .unwrap();
    let mut chunk = [0u8; 64];
    assert!(
        timeout(Duration::from_millis(500), c.read(&mut chunk))
            .await
            .is_err(),
        "a connection past the limit was served"
    );
    // ...while the open ones keep answering...
    assert!(healthz_on(&mut a).await.starts_with("HTTP/1.1 200"));
    // ...and it is served as soon as a slot frees.
    drop(b);
    let answer = timeout(Duration::from_secs(5), read_response(&mut c))
        .await
        .expect("the waiting connection was served once a slot freed");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Rate-limited: refusing more sockets in a row does not repeat the warning.
    let _more: Vec<TcpStream> =
        futures_util::future::join_all((0..5).map(|_| TcpStream::connect(addr(&server))))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
    assert!(healthz_on(&mut a).await.starts_with("HTTP/1.1 200"));
    while let Ok(line) = lines.try_recv() {
        assert!(
            !line.contains("connection limit reached"),
            "repeated: {line}"
        );
    }
}

#[tokio::test]
async fn idle_sockets_past_the_limit_cannot_keep_healthz_from_answering() {
    let (server, mut lines) = start_logged(
        &[
            "--max-connections",
            "3",
            "--header-timeout-seconds",
            "1",
            "--idle-timeout-seconds",
            "1",
        ],
        "warn",
    );
    // Sockets that never send a byte, twice as many as the server serves at once.
    let mut silent = Vec::new();
    for _ in 0..6 {
        silent.push(TcpStream::connect(addr(&server)).await.unwrap());
    }
    await_line(&mut lines, "connection limit reached").await;
    let start = Instant::now();
    assert_eq!(server.probe("/healthz").await, 200);
    assert!(
        start.elapsed() < Duration::from_secs(6),
        "healthz took {:?}",
        start.elapsed()
    );
    // Every silent socket was closed by its header timeout.
    for socket in &mut silent {
        closed_within(socket, Duration::from_secs(5)).await;
    }
}

#[tokio::test]
async fn a_long_poll_longer_than_the_idle_timeout_answers_normally() {
    let (server, _lines) = start_logged(
        &[
            "--idle-timeout-seconds",
            "1",
            "--header-timeout-seconds",
            "1",
            "--body-timeout-seconds",
            "1",
        ],
        "warn",
    );
    let t = tenant_token("acme");
    assert_eq!(
        server.call(Method::PUT, "/v1/queues/q", &t, None).await.0,
        201
    );
    let start = Instant::now();
    let (status, answer) = server
        .call(
            Method::POST,
            "/v1/queues/q/messages/receive",
            &t,
            Some(json!({"wait_seconds": 3})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["messages"], json!([]));
    assert!(
        start.elapsed() >= Duration::from_millis(2900),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn sigterm_answers_a_waiting_long_poll_at_once_and_exits_cleanly() {
    // The request trace tells when the long poll has reached the server.
    let (mut server, mut lines) = start_logged(&[], "info,tower_http=debug");
    await_line(&mut lines, "connection bounds").await;
    let t = tenant_token("acme");
    assert_eq!(
        server.call(Method::PUT, "/v1/queues/q", &t, None).await.0,
        201
    );
    await_line(&mut lines, "finished processing request").await;
    let poll = server
        .request(Method::POST, "/v1/queues/q/messages/receive", &t)
        .json(&json!({"wait_seconds": 20}))
        .send();
    let poll = tokio::spawn(async move {
        let response = poll.await;
        (Instant::now(), response)
    });
    await_line(&mut lines, "started processing request").await;
    let signalled = Instant::now();
    let status = server.terminate().await;
    assert!(status.success(), "{status:?}");
    let (answered_at, response) = poll.await.unwrap();
    let response = response.expect("the long poll was answered");
    assert_eq!(response.status(), 200);
    let answer: serde_json::Value = response.json().await.unwrap();
    assert_eq!(answer["messages"], json!([]), "{answer}");
    // Answered by the stop, not by its 20 s wait (bound loose for a loaded machine).
    let held = answered_at - signalled;
    assert!(
        held < Duration::from_secs(5),
        "the long poll held the stop for {held:?}"
    );
    server.kill();
}

/// SIGTERM without waiting for the process; the test watches what happens next itself.
fn signal_terminate(server: &Server) {
    let signalled = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(signalled.success());
}

/// An open dashboard page keeps a live stream (SSE) open for half an hour: a stop ends it at
/// once instead of waiting for it.
#[tokio::test]
async fn sigterm_ends_the_dashboards_live_streams_and_exits() {
    let mut server = Server::start();
    let t = tenant_token("acme");
    assert_eq!(
        server.call(Method::PUT, "/v1/queues/q", &t, None).await.0,
        201
    );
    let mut live = server
        .client
        .get(server.url("/dashboard/queues/q/live"))
        .header("cookie", format!("sluice_dashboard={t}"))
        .send()
        .await
        .unwrap();
    assert_eq!(live.status(), 200);
    let first = timeout(Duration::from_secs(10), live.chunk())
        .await
        .expect("the first event within 10 s")
        .unwrap()
        .expect("an event");
    assert!(
        String::from_utf8_lossy(&first).contains("event: stats"),
        "{first:?}"
    );
    let reader = tokio::spawn(async move {
        // Reads until the server ends the stream; only keep-alives would come otherwise.
        while let Ok(Some(_)) = live.chunk().await {}
        Instant::now()
    });
    let signalled = Instant::now();
    // Panics unless the process exits within 10 s.
    let status = server.terminate().await;
    assert!(status.success(), "{status:?}");
    let ended = timeout(Duration::from_secs(5), reader)
        .await
        .expect("the stream ended")
        .unwrap();
    assert!(ended - signalled < Duration::from_secs(5));
}

/// With a drain delay, a stopping gateway keeps accepting for that long and answers `/readyz`
/// with 503 on new connections (what a load balancer's health check opens), serving requests
/// meanwhile; then it closes the listener and exits.
#[tokio::test]
async fn the_drain_delay_keeps_serving_while_readiness_fails() {
    let (mut server, mut lines) = start_logged(&["--shutdown-drain-seconds", "5"], "info");
    await_line(&mut lines, "connection bounds").await;
    let t = tenant_token("acme");
    assert_eq!(
        server.call(Method::PUT, "/v1/queues/q", &t, None).await.0,
        201
    );
    let fresh = || {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
    };
    let ready = fresh().get(server.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);

    let signalled = Instant::now();
    signal_terminate(&server);
    await_line(&mut lines, "stopping").await;
    let ready = fresh().get(server.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503, "readiness fails during the drain");
    let sent = fresh()
        .post(server.url("/v1/queues/q/messages"))
        .bearer_auth(&t)
        .json(&json!({"body": "during the drain"}))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 201, "requests are still served");
    assert!(
        signalled.elapsed() < Duration::from_secs(5),
        "checked within the drain"
    );

    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "no exit 15 s after SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status:?}");
    assert!(
        signalled.elapsed() >= Duration::from_secs(5),
        "exited before the drain ended: {:?}",
        signalled.elapsed()
    );
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_soft_descriptor_limit_is_raised_to_the_hard_one() {
    let temp = tempfile::tempdir().unwrap();
    let mut command = Command::new("bash");
    command
        .arg("-c")
        .arg("ulimit -S -n 256 && exec \"$0\" \"$@\"")
        .arg(binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--jwt-secret", SECRET])
        .arg("--data-dir")
        .arg(temp.path())
        .env_remove("SLUICE_CONFIG")
        .env("SLUICE_LOG", "info");
    let (server, mut lines) = spawn_logged(command, temp);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", server.child.id())).unwrap();
    let open_files: Vec<&str> = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .collect();
    let (soft, hard) = (open_files[3], open_files[4]);
    assert_eq!(soft, hard, "{limits}");
    let bounds = await_line(&mut lines, "connection bounds").await;
    assert!(
        bounds.contains(&format!("file-descriptor limit {soft} ")),
        "{bounds}"
    );
    if let Ok(hard) = hard.parse::<u64>() {
        if hard >= 11_300 {
            let max: usize = bounds
                .split("max_connections ")
                .nth(1)
                .and_then(|rest| rest.split(',').next())
                .and_then(|n| n.parse().ok())
                .unwrap();
            assert!(max >= 10_000, "{bounds}");
        }
    }
}

#[test]
fn invalid_connection_settings_stop_start_up_naming_the_setting() {
    for (flag, value, setting) in [
        ("--max-connections", "0", "max_connections"),
        ("--header-timeout-seconds", "0", "header_timeout_seconds"),
        ("--idle-timeout-seconds", "3601", "idle_timeout_seconds"),
        ("--body-timeout-seconds", "0", "body_timeout_seconds"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let output = Command::new(binary())
            .args(["serve", "--listen", "127.0.0.1:0", "--jwt-secret", SECRET])
            .arg("--data-dir")
            .arg(dir.path())
            .args([flag, value])
            .env_remove("SLUICE_CONFIG")
            .output()
            .unwrap();
        assert!(!output.status.success(), "{flag} {value} should not start");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(setting), "{flag} {value}: {stderr}");
    }
}
