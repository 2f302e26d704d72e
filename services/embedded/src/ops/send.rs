//! `send`: encodes the messages, admits them into the queue's index (FIFO deduplication
//! included) and commits them; they become receivable only once durable.

use crate::fifo::DedupKey;
use crate::index::{Accepted, Admission};
use crate::store::{
    encode, BodyRecord, DedupRecord, EncodedMessage, MetaRecord, PayloadRow, WriteOp,
};
use crate::EmbeddedEngine;
use sluice_engine::{
    message_size_with_payload, DeduplicationScope, EngineError, Millis, NewMessage, QueueKey,
    SendRejection, SentMessage,
};
use std::sync::Arc;

impl EmbeddedEngine {
    /// Answers each message once its send (or the send it duplicates) is durable.
    pub(crate) async fn send(
        &self,
        key: &QueueKey,
        messages: Vec<NewMessage>,
        now: Millis,
    ) -> Result<Vec<Result<SentMessage, SendRejection>>, EngineError> {
        let entry = self.queue(key)?;
        let fifo = key.name.is_fifo();
        // Encode before taking the lock: the seq is part of the key, not of the records.
        let mut encoded = Vec::with_capacity(messages.len());
        for m in &messages {
            let meta = encode(&MetaRecord {
                sent_at: now,
                visible_at: m.visible_at,
                size: u64::from(size_of(m)),
                message_id: m.message_id.clone(),
                group_id: m.group_id.clone(),
                deduplication_id: m.deduplication_id.clone().filter(|_| fifo),
                dead_letter: None,
            })?;
            let body = encode(&BodyRecord {
                body: m.body.clone(),
                attributes: m.attributes.clone(),
            })?;
            let payload = m.payload.clone().map(|payload| PayloadRow {
                message_id: m.message_id.clone(),
                payload,
            });
            encoded.push((meta, body, payload));
        }

        let (admissions, keys, pending) = {
            let mut state = entry.live()?;
            let keys: Vec<Option<DedupKey>> = messages
                .iter()
                .map(|m| dedup_key(state.config.deduplication_scope, m).filter(|_| fifo))
                .collect();
            let admissions = state.admit(
                keys.iter()
                    .cloned()
                    .zip(messages.iter().map(|m| m.message_id.as_str())),
                now,
            );
            let forget = state.prune_fifo(now);
            let mut to_write = Vec::new();
            let mut records = Vec::new();
            let mut accepted = Vec::new();
            for (((admission, (meta, body, payload)), m), key) in
                admissions.iter().zip(encoded).zip(&messages).zip(&keys)
            {
                let Admission::New(seq) = *admission else {
                    continue;
                };
                // A duplicate records no `Added`: only what is written here does.
                to_write.push(EncodedMessage {
                    seq,
                    meta,
                    body,
                    payload,
                });
                if let Some(key) = key {
                    records.push(DedupRecord {
                        key: key.clone(),
                        accepted_at: now,
                        seq,
                        message_id: m.message_id.clone(),
                    });
                }
                accepted.push(Accepted {
                    seq,
                    sent_at: now,
                    visible_at: m.visible_at,
                    size: size_of(m),
                    group: fifo.then(|| m.group_id.clone().unwrap_or_default()),
                    dedup: key.clone(),
                });
            }
            // A duplicate of a send still committing answers once that send is durable: a
            // submission made now commits with it or after it.
            let awaits_original = admissions.iter().any(|a| {
                matches!(
                    a,
                    Admission::Duplicate {
                        committed: false,
                        ..
                    }
                )
            });
            if to_write.is_empty() && !awaits_original {
                if !forget.is_empty() {
                    self.store.submit_detached(vec![WriteOp::Forget {
                        uid: entry.uid,
                        keys: forget,
                    }]);
                }
                return Ok(answer_sends(admissions, messages));
            }
            let ops = if !to_write.is_empty() {
                vec![WriteOp::Insert {
                    uid: entry.uid,
                    next_seq: state.next_seq(),
                    messages: to_write,
                    dedup: records,
                    forget,
                }]
            } else if !forget.is_empty() {
                vec![WriteOp::Forget {
                    uid: entry.uid,
                    keys: forget,
                }]
            } else {
                Vec::new()
            };
            let target = Arc::clone(&entry);
            // Submitted under the queue lock, so the store applies it before any later purge or
            // deletion of this queue.
            let pending = self.store.submit_then(ops, move |committed| {
                if accepted.is_empty() {
                    return;
                }
                let mut state = target.lock();
                if committed.is_ok() && !state.deleted {
                    // Only now, durable, do the messages become receivable.
                    state.commit_sent(&accepted);
                } else {
                    state.abandon_sent(&accepted);
                }
            });
            (admissions, keys, pending)
        };
        pending.wait().await?;
        {
            let state = entry.lock();
            if state.deleted {
                return Err(EngineError::QueueNotFound);
            }
            for (admission, key) in admissions.iter().zip(&keys) {
                let awaited = match admission {
                    Admission::Duplicate {
                        seq,
                        committed: false,
                        ..
                    } => Some(*seq),
                    _ => None,
                };
                if let (Some(seq), Some(key)) = (awaited, key) {
                    if !state.dedup_confirmed(key, seq) {
                        return Err(EngineError::Unavailable(
                            "the send this message duplicates was not stored; retry".into(),
                        ));
                    }
                }
            }
        }
        Ok(answer_sends(admissions, messages))
    }
}

/// The message's size as `max_message_bytes` counts it, payload included (at most 64 MiB, so
/// it fits a u32).
fn size_of(m: &NewMessage) -> u32 {
    u32::try_from(message_size_with_payload(
        &m.body,
        &m.attributes,
        m.payload.as_ref(),
    ))
    .unwrap_or(u32::MAX)
}

/// What deduplicates a FIFO message under `scope`; `None` when it has no deduplication id.
fn dedup_key(scope: DeduplicationScope, m: &NewMessage) -> Option<DedupKey> {
    let id = m.deduplication_id.clone()?;
    let group = match scope {
        DeduplicationScope::Queue => String::new(),
        DeduplicationScope::MessageGroup => m.group_id.clone().unwrap_or_default(),
    };
    Some(DedupKey { group, id })
}

/// The answers of a send, in order, from what was admitted.
fn answer_sends(
    admissions: Vec<Admission>,
    messages: Vec<NewMessage>,
) -> Vec<Result<SentMessage, SendRejection>> {
    admissions
        .into_iter()
        .zip(messages)
        .map(|(admission, m)| match admission {
            Admission::New(seq) => Ok(SentMessage {
                message_id: m.message_id,
                seq,
                duplicate: false,
            }),
            Admission::Duplicate {
                seq, message_id, ..
            } => Ok(SentMessage {
                message_id,
                seq,
                duplicate: true,
            }),
            Admission::Full => Err(SendRejection::QueueFull),
        })
        .collect()
}
