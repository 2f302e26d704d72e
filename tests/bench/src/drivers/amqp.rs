//! RabbitMQ over AMQP 0-9-1 (`lapin`), set up as the closest durable peer of Sluice's embedded
//! engine: a durable classic queue, persistent messages (delivery mode 2), publisher confirms
//! (a send counts only once the broker confirmed it, i.e. after it is on disk) and manual acks.
//!
//! By default each producer and each consumer opens its own connection, as separate client
//! processes would (Sluice's clients likewise hold one keep-alive connection each);
//! `--amqp-connections N` shares N connections instead (see `AmqpDriver::open`).
//!
//! Batches map onto AMQP's own idioms: a producer publishes `batch` messages back to back and
//! then waits for all their confirms; a consumer takes whatever the broker has pushed (up to
//! `batch`) and acknowledges it with one `basic.ack` carrying `multiple` — the AMQP equivalent
//! of a batch delete. The broker pushes up to the prefetch count ahead of the consumer, which is
//! how AMQP consumers are run in practice; SQS-style consumers poll instead.

use super::{Consumer, Delivery, Driver, Outcome, Outgoing, Producer, QueueSpec, Unsupported};
use anyhow::{Context, Result};
use futures_util::{FutureExt, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::Confirmation;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

pub(crate) struct AmqpDriver {
    uri: String,
    queue: String,
    prefetch: u16,
    /// Shared connections that clients open their channels on, round robin; empty: each
    /// client opens its own connection.
    shared: Vec<Connection>,
    next: AtomicUsize,
    /// Kept open to delete the queue at the end.
    admin: Channel,
    _admin_connection: Connection,
}

async fn connect(uri: &str) -> Result<Connection> {
    Connection::connect(uri, ConnectionProperties::default())
        .await
        .with_context(|| format!("connecting to {uri}"))
}

async fn open_channel(uri: &str) -> Result<(Connection, Channel)> {
    let connection = connect(uri).await?;
    let channel = connection
        .create_channel()
        .await
        .context("opening a channel")?;
    Ok((connection, channel))
}

impl AmqpDriver {
    /// `connections`: 0 gives every producer and consumer its own connection; N > 0 shares N
    /// connections among them (a channel each). lapin runs one I/O thread per connection, so
    /// sharing costs the load generator less CPU on a small machine.
    pub(crate) async fn open(
        uri: &str,
        spec: &QueueSpec,
        prefetch: u16,
        connections: usize,
    ) -> Result<Self> {
        if spec.fifo {
            // RabbitMQ has no message groups with per-group ordering and deduplication.
            return Err(
                Unsupported("RabbitMQ has no FIFO queues with message groups".into()).into(),
            );
        }
        let (connection, admin) = open_channel(uri).await?;
        admin
            .queue_declare(
                spec.name.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("declaring queue {}", spec.name))?;
        let mut shared = Vec::with_capacity(connections);
        for _ in 0..connections {
            shared.push(connect(uri).await?);
        }
        Ok(Self {
            uri: uri.to_owned(),
            queue: spec.name.clone(),
            prefetch,
            shared,
            next: AtomicUsize::new(0),
            admin,
            _admin_connection: connection,
        })
    }

    /// A channel for one client, and the connection it must keep alive when it owns it.
    async fn client_channel(&self) -> Result<(Option<Connection>, Channel)> {
        if self.shared.is_empty() {
            let (connection, channel) = open_channel(&self.uri).await?;
            return Ok((Some(connection), channel));
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.shared.len();
        let channel = self.shared[i]
            .create_channel()
            .await
            .context("opening a channel")?;
        Ok((None, channel))
    }
}

impl Driver for AmqpDriver {
    type Producer = AmqpProducer;
    type Consumer = AmqpConsumer;

    async fn producer(&self) -> Result<AmqpProducer> {
        let (connection, channel) = self.client_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .context("confirm.select")?;
        Ok(AmqpProducer {
            channel,
            queue: self.queue.clone(),
            _connection: connection,
        })
    }

    async fn consumer(&self, max: usize, wait: Duration) -> Result<AmqpConsumer> {
        let (connection, channel) = self.client_channel().await?;
        channel
            .basic_qos(self.prefetch, BasicQosOptions::default())
            .await
            .context("basic.qos")?;
        let stream = channel
            .basic_consume(
                self.queue.as_str().into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .context("basic.consume")?;
        Ok(AmqpConsumer {
            stream,
            max,
            wait,
            _channel: channel,
            _connection: connection,
        })
    }

    async fn delete_queue(&self) -> Result<()> {
        self.admin
            .queue_delete(self.queue.as_str().into(), QueueDeleteOptions::default())
            .await
            .context("queue.delete")?;
        Ok(())
    }
}

pub(crate) struct AmqpProducer {
    channel: Channel,
    queue: String,
    _connection: Option<Connection>,
}

impl Producer for AmqpProducer {
    async fn send(&mut self, batch: &[Outgoing]) -> Result<Outcome<Vec<bool>>> {
        let mut confirms = Vec::with_capacity(batch.len());
        for m in batch {
            let confirm = self
                .channel
                .basic_publish(
                    "".into(),
                    self.queue.as_str().into(),
                    BasicPublishOptions::default(),
                    m.body.as_bytes(),
                    // 2 = persistent: written to disk before the confirm.
                    BasicProperties::default().with_delivery_mode(2),
                )
                .await
                .context("basic.publish")?;
            confirms.push(confirm);
        }
        let mut acked = Vec::with_capacity(batch.len());
        let mut failure = None;
        for confirm in confirms {
            match confirm.await.context("publisher confirm")? {
                Confirmation::Ack(_) => acked.push(true),
                Confirmation::Nack(_) | Confirmation::NotRequested => {
                    failure = Some("publish: broker nacked".to_owned());
                    acked.push(false);
                }
            }
        }
        Ok(Outcome {
            value: acked,
            failure,
        })
    }
}

pub(crate) struct AmqpConsumer {
    stream: lapin::Consumer,
    max: usize,
    wait: Duration,
    _channel: Channel,
    _connection: Option<Connection>,
}

impl Consumer for AmqpConsumer {
    type Handle = lapin::Acker;

    async fn receive(&mut self) -> Result<Vec<Delivery<Self::Handle>>> {
        let mut out = Vec::with_capacity(self.max);
        // Wait (up to the long-poll time) for the first delivery, then take what is already
        // buffered, without waiting, up to the batch size.
        let first = match tokio::time::timeout(self.wait, self.stream.next()).await {
            Err(_) => return Ok(out),
            Ok(None) => anyhow::bail!("consumer cancelled by the broker"),
            Ok(Some(d)) => d.context("delivery")?,
        };
        out.push(Delivery {
            body: first.data,
            handle: first.acker,
        });
        while out.len() < self.max {
            match self.stream.next().now_or_never() {
                Some(Some(d)) => {
                    let d = d.context("delivery")?;
                    out.push(Delivery {
                        body: d.data,
                        handle: d.acker,
                    });
                }
                _ => break,
            }
        }
        Ok(out)
    }

    async fn delete(&mut self, handles: Vec<Self::Handle>) -> Result<Outcome<usize>> {
        let n = handles.len();
        if let Some(last) = handles.last() {
            // Deliveries on a channel have increasing tags and this consumer acknowledges all it
            // took, so `multiple` on the last one acknowledges exactly this batch.
            last.ack(BasicAckOptions { multiple: n > 1 })
                .await
                .context("basic.ack")?;
        }
        Ok(Outcome::ok(n))
    }
}
