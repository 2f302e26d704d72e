//! The HTTP ceiling: a server that speaks the shape of Sluice's message API and does nothing.
//!
//! It runs on the same stack as Sluice (axum on hyper on tokio, `axum::serve` with the same
//! defaults), reads every request body in full, and answers with canned bodies the size of
//! Sluice's: a batch send gets ten `successful` entries, a receive gets `max_messages` messages
//! of `--body-size` bytes with 32-character receipt handles, a delete batch gets ten entries.
//! Driven by the same client code and concurrency as Sluice, it measures what HTTP, JSON on the
//! client side and the loopback cost on this machine, with no queue behind them.

use anyhow::{Context, Result};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::Arc;

struct Canned {
    send: Bytes,
    send_batch: Bytes,
    delete_batch: Bytes,
    /// Receive answers with 0..=10 messages.
    receive: Vec<Bytes>,
    queue: Bytes,
}

const SEND_RESULT: &str = r#""message_id":"2e002c9a-bdda-415d-94db-e0998ce644b1","md5_of_body":"0cc175b9c0f1b6a831c399e269772661","md5_of_attributes":null,"sequence_number":null,"duplicate":false"#;

impl Canned {
    fn new(body_size: usize) -> Result<Self> {
        let mut send_batch = String::from(r#"{"successful":["#);
        let mut delete_batch = String::from(r#"{"successful":["#);
        for i in 0..10 {
            let sep = if i == 0 { "" } else { "," };
            write!(send_batch, r#"{sep}{{"id":"{i}",{SEND_RESULT}}}"#)?;
            write!(delete_batch, r#"{sep}{{"id":"{i}"}}"#)?;
        }
        send_batch.push_str(r#"],"failed":[]}"#);
        delete_batch.push_str(r#"],"failed":[]}"#);
        // A body that is not one of the load generator's (all `x`): the client skips its
        // ledger for this target anyway.
        let body = "x".repeat(body_size);
        let receive = (0..=10)
            .map(|n| {
                let mut json = String::from(r#"{"messages":["#);
                for i in 0..n {
                    let sep = if i == 0 { "" } else { "," };
                    write!(
                        json,
                        r#"{sep}{{"message_id":"8e5d87ac-a264-407c-b6e8-9ce1d1426158","receipt_handle":"y03l0_EDqA0AAAAAAAAAAWKlRjSPA-{i:02}","body":"{body}","md5_of_body":"49f68a5c8493ec2c0bf489821c21fc3b","attributes":{{}},"sent_at":"2026-11-29T12:10:41.771Z","receive_count":1,"first_received_at":"2026-11-29T12:10:41.802Z","group_id":null,"deduplication_id":null,"sequence_number":null,"dead_letter":null}}"#
                    )?;
                }
                json.push_str("]}");
                Ok(Bytes::from(json))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            send: Bytes::from(format!("{{{SEND_RESULT}}}")),
            send_batch: Bytes::from(send_batch),
            delete_batch: Bytes::from(delete_batch),
            receive,
            queue: Bytes::from_static(br#"{"name":"noop","kind":"standard"}"#),
        })
    }
}

/// `"max_messages":N` from a receive request, without a JSON parser (the server does nothing).
fn max_messages(body: &[u8]) -> usize {
    let key = b"\"max_messages\":";
    body.windows(key.len())
        .position(|w| w == key)
        .map(|at| {
            body[at + key.len()..]
                .iter()
                .skip_while(|b| b.is_ascii_whitespace())
                .take_while(|b| b.is_ascii_digit())
                .fold(0usize, |n, d| n * 10 + usize::from(d - b'0'))
        })
        .unwrap_or(1)
        .clamp(0, 10)
}

async fn handle(
    State(canned): State<Arc<Canned>>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    let path = uri.path();
    let json = |status: StatusCode, bytes: &Bytes| {
        (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            bytes.clone(),
        )
            .into_response()
    };
    match method {
        Method::POST if path.ends_with("/messages/batch") => {
            json(StatusCode::OK, &canned.send_batch)
        }
        Method::POST if path.ends_with("/messages/receive") => {
            json(StatusCode::OK, &canned.receive[max_messages(&body)])
        }
        Method::POST if path.ends_with("/messages/delete") => {
            json(StatusCode::OK, &canned.delete_batch)
        }
        Method::POST if path.ends_with("/messages") => json(StatusCode::CREATED, &canned.send),
        Method::PUT => json(StatusCode::CREATED, &canned.queue),
        Method::DELETE => StatusCode::NO_CONTENT.into_response(),
        _ => StatusCode::OK.into_response(),
    }
}

/// Serves until killed. Prints `sluice-bench noop listening on http://ADDR` first, like Sluice.
pub(crate) async fn serve(listen: &str, body_size: usize) -> Result<()> {
    let canned = Arc::new(Canned::new(body_size)?);
    let app = Router::new().fallback(handle).with_state(canned);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let addr = listener.local_addr()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "sluice-bench noop listening on http://{addr}")?;
    out.flush()?;
    drop(out);
    axum::serve(listener, app).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_max_messages() {
        assert_eq!(max_messages(br#"{"max_messages":7,"wait_seconds":1}"#), 7);
        assert_eq!(max_messages(br#"{"max_messages": 10}"#), 10);
        assert_eq!(max_messages(br#"{"max_messages":99}"#), 10);
        assert_eq!(max_messages(b"{}"), 1);
    }

    #[test]
    fn canned_answers_parse_as_json() -> Result<()> {
        let c = Canned::new(1024)?;
        for bytes in [
            &c.send,
            &c.send_batch,
            &c.delete_batch,
            &c.receive[10],
            &c.queue,
        ] {
            serde_json::from_slice::<serde_json::Value>(bytes)?;
        }
        Ok(())
    }
}
