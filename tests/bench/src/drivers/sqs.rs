//! The SQS API through the official `aws-sdk-sqs`, pointed at a local endpoint (moto's server):
//! `SendMessage`/`SendMessageBatch`, `ReceiveMessage` with long polling,
//! `DeleteMessage`/`DeleteMessageBatch`. FIFO queues use `MessageGroupId` and
//! `MessageDeduplicationId`.
//!
//! The client is built without `aws-config` and without a TLS stack (plain HTTP on loopback),
//! with static dummy credentials, and with the SDK's retries off: a benchmark should count
//! failures, not hide them behind retries.

use super::{Consumer, Delivery, Driver, Outcome, Outgoing, Producer, QueueSpec};
use anyhow::{anyhow, Context, Result};
use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::config::timeout::TimeoutConfig;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, QueueAttributeName, SendMessageBatchRequestEntry,
};
use aws_sdk_sqs::Client;
use std::time::Duration;

pub(crate) struct SqsDriver {
    client: Client,
    queue_url: String,
}

/// A client for `endpoint` (e.g. `http://127.0.0.1:5000`), region us-east-1, dummy credentials.
pub(crate) fn client(endpoint: &str) -> Client {
    let http = aws_smithy_http_client::Builder::new().build_http();
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new(
            "bench",
            "bench",
            None,
            None,
            "sluice-bench",
        ))
        .http_client(http)
        .retry_config(RetryConfig::disabled())
        .timeout_config(
            TimeoutConfig::builder()
                .operation_timeout(Duration::from_secs(60))
                .build(),
        )
        .build();
    Client::from_conf(config)
}

/// The SDK's error with its service error code, not only "service error".
fn sdk_error<E: std::error::Error + Send + Sync + 'static>(what: &str, e: E) -> anyhow::Error {
    let detail = aws_sdk_sqs::error::DisplayErrorContext(&e).to_string();
    anyhow!("{what}: {}", detail.chars().take(200).collect::<String>())
}

impl SqsDriver {
    pub(crate) async fn open(client: Client, spec: &QueueSpec) -> Result<Self> {
        let mut create = client.create_queue().queue_name(&spec.name);
        if spec.fifo {
            create = create.attributes(QueueAttributeName::FifoQueue, "true");
        }
        let queue_url = create
            .send()
            .await
            .map_err(|e| sdk_error("CreateQueue", e))?
            .queue_url
            .context("CreateQueue answered no QueueUrl")?;
        Ok(Self { client, queue_url })
    }
}

impl Driver for SqsDriver {
    type Producer = SqsProducer;
    type Consumer = SqsConsumer;

    async fn producer(&self) -> Result<SqsProducer> {
        Ok(SqsProducer {
            client: self.client.clone(),
            queue_url: self.queue_url.clone(),
        })
    }

    async fn consumer(&self, max: usize, wait: Duration) -> Result<SqsConsumer> {
        Ok(SqsConsumer {
            client: self.client.clone(),
            queue_url: self.queue_url.clone(),
            max: i32::try_from(max).unwrap_or(10),
            wait: i32::try_from(wait.as_secs()).unwrap_or(1),
        })
    }

    async fn delete_queue(&self) -> Result<()> {
        self.client
            .delete_queue()
            .queue_url(&self.queue_url)
            .send()
            .await
            .map_err(|e| sdk_error("DeleteQueue", e))?;
        Ok(())
    }
}

pub(crate) struct SqsProducer {
    client: Client,
    queue_url: String,
}

impl Producer for SqsProducer {
    async fn send(&mut self, batch: &[Outgoing]) -> Result<Outcome<Vec<bool>>> {
        if let [m] = batch {
            self.client
                .send_message()
                .queue_url(&self.queue_url)
                .message_body(&m.body)
                .set_message_group_id(m.group.clone())
                .set_message_deduplication_id(m.dedup.clone())
                .send()
                .await
                .map_err(|e| sdk_error("SendMessage", e))?;
            return Ok(Outcome::ok(vec![true]));
        }
        let entries = batch
            .iter()
            .enumerate()
            .map(|(i, m)| {
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(&m.body)
                    .set_message_group_id(m.group.clone())
                    .set_message_deduplication_id(m.dedup.clone())
                    .build()
                    .context("SendMessageBatch entry")
            })
            .collect::<Result<Vec<_>>>()?;
        let answer = self
            .client
            .send_message_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| sdk_error("SendMessageBatch", e))?;
        let mut acked = vec![false; batch.len()];
        for ok in answer.successful() {
            if let Some(slot) = ok.id().parse::<usize>().ok().and_then(|i| acked.get_mut(i)) {
                *slot = true;
            }
        }
        let failure = answer
            .failed()
            .first()
            .map(|f| format!("SendMessageBatch: entry failed: {}", f.code()));
        Ok(Outcome {
            value: acked,
            failure,
        })
    }
}

pub(crate) struct SqsConsumer {
    client: Client,
    queue_url: String,
    max: i32,
    wait: i32,
}

impl Consumer for SqsConsumer {
    type Handle = String;

    async fn receive(&mut self) -> Result<Vec<Delivery<String>>> {
        let answer = self
            .client
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(self.max)
            .wait_time_seconds(self.wait)
            .send()
            .await
            .map_err(|e| sdk_error("ReceiveMessage", e))?;
        answer
            .messages
            .unwrap_or_default()
            .into_iter()
            .map(|m| {
                Ok(Delivery {
                    body: m.body.unwrap_or_default().into_bytes(),
                    handle: m.receipt_handle.context("message without ReceiptHandle")?,
                })
            })
            .collect()
    }

    async fn delete(&mut self, handles: Vec<String>) -> Result<Outcome<usize>> {
        if let [handle] = handles.as_slice() {
            self.client
                .delete_message()
                .queue_url(&self.queue_url)
                .receipt_handle(handle)
                .send()
                .await
                .map_err(|e| sdk_error("DeleteMessage", e))?;
            return Ok(Outcome::ok(1));
        }
        let entries = handles
            .into_iter()
            .enumerate()
            .map(|(i, h)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(h)
                    .build()
                    .context("DeleteMessageBatch entry")
            })
            .collect::<Result<Vec<_>>>()?;
        let answer = self
            .client
            .delete_message_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| sdk_error("DeleteMessageBatch", e))?;
        let failure = answer
            .failed()
            .first()
            .map(|f| format!("DeleteMessageBatch: entry failed: {}", f.code()));
        Ok(Outcome {
            value: answer.successful().len(),
            failure,
        })
    }
}
