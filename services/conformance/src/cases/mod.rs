//! The cases, one module per engine capability. Each case states one guarantee and checks it
//! through the services and the engine; this module holds the helpers they share.
#![allow(clippy::unwrap_used)]

mod dead_letters;
mod fifo;
mod messages;
mod payloads;
mod publishing;
mod queues;
mod records;
mod redrive_tasks;
mod stored_bytes;
mod tenants;
mod upkeep;

pub use dead_letters::*;
pub use fifo::*;
pub use messages::*;
pub use payloads::*;
pub use publishing::*;
pub use queues::*;
pub use records::*;
pub use redrive_tasks::*;
pub use stored_bytes::*;
pub use tenants::*;
pub use upkeep::*;

use crate::Ctx;
use sha2::Digest;
use sluice_engine::{
    Clock, HandleError, MessageAttribute, MessageState, QueueKey, QueueName, Quotas, TenantId,
};
use sluice_services::{
    ChangeVisibilityEntry, DeleteEntry, MessageView, QueueConfigPatch, ReceiveRequest, SendEntry,
    SendRequest, ServiceError,
};
use std::collections::BTreeMap;
use std::time::Duration;

const SECOND: u64 = 1000;

fn text(body: &str) -> SendRequest {
    SendRequest {
        body: body.to_owned(),
        ..SendRequest::default()
    }
}

fn receive_n(max: u32, visibility: u32) -> ReceiveRequest {
    ReceiveRequest {
        max_messages: Some(max),
        visibility_timeout_seconds: Some(visibility),
        wait_seconds: Some(0),
        request_attempt_id: None,
    }
}

fn bodies(messages: &[MessageView]) -> Vec<&str> {
    let mut out: Vec<&str> = messages.iter().map(|m| m.body.as_str()).collect();
    out.sort();
    out
}

fn handle(message: &MessageView) -> String {
    message
        .receipt_handle
        .clone()
        .expect("a received message carries a handle")
}

impl Ctx {
    async fn queue(&self, name: &str, patch: QueueConfigPatch) {
        let (_, created) = self
            .services
            .put_queue(&self.tenant, name, patch)
            .await
            .unwrap();
        assert!(created, "{name} should be new");
    }

    async fn send(&self, queue: &str, body: &str) {
        self.services
            .send(&self.tenant, queue, text(body))
            .await
            .unwrap();
    }

    async fn receive(&self, queue: &str, max: u32, visibility: u32) -> Vec<MessageView> {
        self.services
            .receive(&self.tenant, queue, receive_n(max, visibility))
            .await
            .unwrap()
    }

    async fn stats(&self, queue: &str) -> (u64, u64, u64) {
        let view = self.services.get_queue(&self.tenant, queue).await.unwrap();
        (view.stats.visible, view.stats.in_flight, view.stats.delayed)
    }
}

fn field_of<T>(result: Result<T, ServiceError>) -> String {
    match result {
        Err(ServiceError::Validation { field, .. }) => field,
        Err(other) => panic!("expected a validation error, got {other:?}"),
        Ok(_) => panic!("expected a validation error, got success"),
    }
}

/// Formats epoch milliseconds as RFC 3339 UTC without a date library (civil-from-days).
fn chrono_free_rfc3339(millis: i64) -> String {
    let days = millis.div_euclid(86_400_000);
    let rest = millis.rem_euclid(86_400_000);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000
    )
}
