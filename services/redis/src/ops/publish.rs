//! The commit of a publish (`publish.lua`): in the topic's slot, one script records every
//! publication of the call (deduplication and sequence number on FIFO topics, filtered-out
//! counts, the outbox entry) and answers the pending entries to deliver before them.

use super::payload_events::payload_tag;
use super::transfers::RECOVERY_GRACE_MS;
use crate::codec::{to_json, Reply};
use crate::conn::Call;
use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, Millis, Publication, TopicKey, DEDUPLICATION_WINDOW_MS};

/// How many pending entries a commit answers at most: on a FIFO topic, past it the caller's
/// own deliveries wait for recovery (which delivers in order).
pub(crate) const PENDING_LIMIT: usize = 256;

/// How many of the oldest pending entries a standard topic's commit looks at for ones past
/// the grace (it answers only those): enough that a busy topic drains what dead publishers
/// left, a few at a time, without reading its whole outbox on every publish.
const STANDARD_SCAN: usize = 16;

/// What the commit recorded for one publication.
pub(crate) struct Recorded {
    pub duplicate: bool,
    /// The topic's sequence number (FIFO topics), the original's for a duplicate.
    pub seq: Option<u64>,
    /// The publication's message id, the original's for a duplicate.
    pub message_id: String,
    /// Its outbox entry (`None`: a duplicate, or nothing to deliver).
    pub entry: Option<String>,
}

/// The commit's answer.
pub(crate) struct Committed {
    pub recorded: Vec<Recorded>,
    /// Whether `pending` holds every entry to deliver first (FIFO topics).
    pub complete: bool,
    /// Entries pending before this call, to deliver first, in order: (entry id, value).
    pub pending: Vec<(String, String)>,
}

impl RedisEngine {
    pub(crate) fn topic_call(&self, script: &'static redis::Script, topic: &TopicKey) -> Call {
        Call::new(script, self.keys.topic(topic))
    }

    /// Records `publications` in the topic's slot.
    pub(crate) async fn publish_commit(
        &self,
        topic: &TopicKey,
        publications: &[Publication],
        now: Millis,
    ) -> Result<Committed, EngineError> {
        let fifo = topic.is_fifo();
        if publications.iter().any(|p| p.payload.is_some()) {
            self.register_topic_payload_log(topic).await?;
        }
        let mut call = self.topic_call(&scripts::PUBLISH, topic);
        call.arg(now)
            .arg(u8::from(fifo))
            .arg(DEDUPLICATION_WINDOW_MS)
            .arg(RECOVERY_GRACE_MS)
            .arg(if fifo { PENDING_LIMIT } else { STANDARD_SCAN });
        for p in publications {
            call.arg(&p.message_id)
                .arg(p.deduplication_id.as_deref().unwrap_or_default())
                .arg(p.deliveries.len())
                .arg(to_json(p)?)
                .arg(p.filtered_out.len());
            for id in &p.filtered_out {
                call.arg(id);
            }
            // One `Added` per copy, recorded with the publication (none for a duplicate).
            if p.payload.is_some() {
                call.arg(p.deliveries.len());
                for d in &p.deliveries {
                    call.arg(payload_tag(&d.message_id, p.payload.as_ref()));
                }
            } else {
                call.arg(0);
            }
        }
        let reply = self.redis.eval(&call, true).await;
        if publications.iter().any(|p| p.payload.is_some()) {
            self.payload_log_written(self.keys.topic_payload_log(topic));
        }
        let mut reply = Reply::new(reply?)?;
        let mut recorded = Vec::with_capacity(publications.len());
        for _ in publications {
            let duplicate = reply.int()? == 2;
            let seq = reply.u64()?;
            let message_id = reply.text()?;
            let entry = reply.text()?;
            recorded.push(Recorded {
                duplicate,
                seq: fifo.then_some(seq),
                message_id,
                entry: (!entry.is_empty()).then_some(entry),
            });
        }
        let complete = reply.int()? == 1;
        let mut pending = Vec::new();
        while !reply.is_empty() {
            pending.push((reply.text()?, reply.text()?));
        }
        Ok(Committed {
            recorded,
            complete,
            pending,
        })
    }
}
