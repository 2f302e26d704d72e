//! `publish`: the fan-out of a topic's publications to their subscriptions' queues, as one
//! durable commit.
//!
//! A call runs in three steps, like a move (`transfer.rs`). Under the topic's lock (which orders
//! its publishes) each publication is found new or a duplicate and, on FIFO topics, numbered;
//! its copies are rendered ([`Publication::render`]). Then, with every destination queue's
//! index locked too (in the fixed order moves use), each copy is admitted into its queue — or
//! its dead-letter queue, or nowhere — and given a seq there, and the whole call is submitted
//! as one job: an [`WriteOp::Insert`] per queue and one [`WriteOp::Publish`] with the topic's
//! sequence number, deduplication records and counter increments. The commit thread applies it
//! in one transaction, so a crash leaves all of it or none of it and nothing needs recovery.
//! Finally, on the commit thread, the queues index the copies (receivable only now, listeners
//! woken) and the topic confirms its records and counts, or both drop what they reserved.
//!
//! Submitting under the topic's lock and the queues' locks is what makes every queue receive a
//! FIFO topic's copies in sequence-number order: seqs in the topic and in each queue are handed
//! out in the same order, and the commit thread keeps the order of submissions.

use crate::index::{Accepted, QueueState};
use crate::ops::topics::forget_dedup;
use crate::queue_entry::{QueueEntry, QueueGuard};
use crate::store::{
    encode, BodyRecord, EncodedMessage, MetaRecord, PayloadRow, Pending, TopicDedupRecord, WriteOp,
};
use crate::topic_entry::{TopicEntry, TopicState};
use crate::EmbeddedEngine;
use sluice_engine::{
    Delivery, DeliveryFailure, DeliveryOutcome, EngineError, Millis, PayloadRef, Publication,
    Published, QueueKey, QueueName, SubscriptionStats, TopicKey,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// What becomes of one publication, decided under the topic's lock.
#[derive(Debug, Clone)]
enum Plan {
    /// Published, with the topic's sequence number (FIFO topics).
    New { seq: Option<u64> },
    /// A FIFO deduplication hit: the original's message id and seq. `committed: false` while
    /// the original (of another call) is not durable yet: the answer waits for it.
    Duplicate {
        id: String,
        message_id: String,
        seq: u64,
        committed: bool,
    },
}

/// One rendered copy, encoded: its body record and its size as a queue's limit counts it.
struct Rendered {
    body: Vec<u8>,
    size: usize,
    payload: Option<PayloadRef>,
}

/// What was submitted, and what the answers need once it is durable.
struct Submitted {
    answers: Vec<Published>,
    /// Duplicates of publications of other calls not yet durable: `(deduplication id, seq)`.
    awaited: Vec<(String, u64)>,
    pending: Option<Pending>,
}

impl EmbeddedEngine {
    /// Answers once the publications (and the ones they duplicate) are durable.
    pub(crate) async fn publish(
        &self,
        topic: &TopicKey,
        publications: Vec<Publication>,
        now: Millis,
    ) -> Result<Vec<Published>, EngineError> {
        if publications.is_empty() {
            return Ok(Vec::new());
        }
        let fifo = topic.is_fifo();
        let queues = self.destinations(topic, &publications);
        // A standard topic's copies depend on nothing under the lock: rendered before it.
        let mut rendered = if fifo {
            None
        } else {
            let plans = vec![Plan::New { seq: None }; publications.len()];
            Some(render_all(&publications, &plans)?)
        };
        let (entry, submitted) = loop {
            let entry = self.topic(topic);
            let mut state = entry.lock();
            if state.deleted {
                // Deleted since the lookup: the next lookup finds its successor.
                continue;
            }
            let plans = plan(&state, &publications, fifo, now);
            let bodies = match rendered.take() {
                Some(bodies) => bodies,
                None => render_all(&publications, &plans)?,
            };
            let mut locked = LockedQueues::lock(&queues);
            let submitted = self.submit_publications(
                topic,
                &entry,
                &mut state,
                &mut locked,
                &publications,
                plans,
                bodies,
                now,
            )?;
            drop(locked);
            drop(state);
            break (entry, submitted);
        };
        if let Some(pending) = submitted.pending {
            pending.wait().await?;
        }
        if !submitted.awaited.is_empty() {
            let state = entry.lock();
            if submitted
                .awaited
                .iter()
                .any(|(id, seq)| !state.confirmed(id, *seq))
            {
                return Err(EngineError::Unavailable(
                    "the publication this one duplicates was not stored; retry".into(),
                ));
            }
        }
        Ok(submitted.answers)
    }

    /// The existing queues, of the topic's tenant, that the publications' deliveries name (as
    /// their queue or their dead-letter queue).
    fn destinations(
        &self,
        topic: &TopicKey,
        publications: &[Publication],
    ) -> BTreeMap<QueueName, Arc<QueueEntry>> {
        let mut queues = BTreeMap::new();
        for delivery in publications.iter().flat_map(|p| &p.deliveries) {
            let names = std::iter::once(&delivery.queue).chain(&delivery.dead_letter_queue);
            for name in names {
                if queues.contains_key(name) {
                    continue;
                }
                let key = QueueKey::new(topic.tenant.clone(), name.clone());
                if let Ok(entry) = self.queue(&key) {
                    queues.insert(name.clone(), entry);
                }
            }
        }
        queues
    }

    /// Admits every copy, numbers it in its queue and submits the whole call as one job; the
    /// caller holds the topic's lock and every destination's.
    #[allow(clippy::too_many_arguments)]
    fn submit_publications(
        &self,
        topic: &TopicKey,
        entry: &Arc<TopicEntry>,
        state: &mut TopicState,
        locked: &mut LockedQueues<'_>,
        publications: &[Publication],
        plans: Vec<Plan>,
        bodies: Vec<Vec<Rendered>>,
        now: Millis,
    ) -> Result<Submitted, EngineError> {
        // Everything that can fail comes first, so a failure leaves nothing reserved.
        let destinations = encode_metas(locked, publications, &plans, &bodies, now)?;

        let forget = state.prune(now);
        let mut answers = Vec::with_capacity(publications.len());
        let mut awaited = Vec::new();
        let mut records = Vec::new();
        let mut counts: BTreeMap<String, SubscriptionStats> = BTreeMap::new();
        // Per locked queue (by index): the copies to write and what its index learns of them.
        let mut writes: BTreeMap<usize, (Vec<EncodedMessage>, Vec<Accepted>)> = BTreeMap::new();
        // Copies with a payload that no queue took: added and released at this commit.
        let mut failed = Vec::new();
        let mut numbered = false;
        for (((p, plan), copies), metas) in
            publications.iter().zip(plans).zip(bodies).zip(destinations)
        {
            let seq = match plan {
                Plan::Duplicate {
                    id,
                    message_id,
                    seq,
                    committed,
                } => {
                    if !committed {
                        awaited.push((id, seq));
                    }
                    answers.push(Published {
                        message_id,
                        seq: Some(seq),
                        duplicate: true,
                        outcomes: Vec::new(),
                    });
                    continue;
                }
                Plan::New { seq } => seq,
            };
            if let Some(seq) = seq {
                numbered = true;
                let id = p.deduplication_id.as_deref();
                state.accept(seq, id, &p.message_id, now);
                if let Some(id) = id {
                    records.push(TopicDedupRecord {
                        id: id.to_owned(),
                        accepted_at: now,
                        seq,
                        message_id: p.message_id.clone(),
                    });
                }
            }
            for subscription in &p.filtered_out {
                counts.entry(subscription.clone()).or_default().filtered_out += 1;
            }
            let mut outcomes = Vec::with_capacity(p.deliveries.len());
            for ((delivery, copy), destinations) in p.deliveries.iter().zip(copies).zip(metas) {
                let (outcome, target) = admit(locked, destinations, copy.size);
                let stats = counts.entry(delivery.subscription_id.clone()).or_default();
                match outcome {
                    DeliveryOutcome::Delivered => stats.delivered += 1,
                    _ => stats.failed += 1,
                }
                let payload = copy.payload.map(|payload| PayloadRow {
                    message_id: delivery.message_id.clone(),
                    payload,
                });
                if let Some(Admitted { queue, meta, index }) = target {
                    let write = writes.entry(queue).or_default();
                    write.0.push(EncodedMessage {
                        seq: index.seq,
                        meta,
                        body: copy.body,
                        payload,
                    });
                    write.1.push(index);
                } else if let Some(row) = payload {
                    failed.push(row);
                }
                outcomes.push((delivery.subscription_id.clone(), outcome));
            }
            answers.push(Published {
                message_id: p.message_id.clone(),
                seq,
                duplicate: false,
                outcomes,
            });
        }

        let counts: Vec<(String, SubscriptionStats)> = counts.into_iter().collect();
        let changes = numbered || !counts.is_empty() || !writes.is_empty();
        let topic_key = topic.to_string();
        if !changes {
            if !forget.is_empty() {
                self.store
                    .submit_detached(vec![forget_dedup(topic_key, forget)]);
            }
            // A duplicate of a publication still committing answers once that is durable: a
            // submission made now commits with it or after it.
            let pending = (!awaited.is_empty()).then(|| self.store.submit(Vec::new()));
            return Ok(Submitted {
                answers,
                awaited,
                pending,
            });
        }
        state.touch();
        let mut ops = Vec::with_capacity(writes.len() + 1);
        let mut targets = Vec::with_capacity(writes.len());
        for (i, (messages, accepted)) in writes {
            let (queue, queue_state) = locked.get(i);
            ops.push(WriteOp::Insert {
                uid: queue.uid,
                next_seq: queue_state.next_seq(),
                messages,
                dedup: Vec::new(),
                forget: Vec::new(),
            });
            targets.push((Arc::clone(queue), accepted));
        }
        let accepted_ids: Vec<(String, u64)> =
            records.iter().map(|r| (r.id.clone(), r.seq)).collect();
        ops.push(WriteOp::Publish {
            topic: topic_key,
            next_seq: numbered.then(|| state.next_seq()),
            dedup: records,
            forget,
            counts: counts.clone(),
            failed,
        });
        let topic_entry = Arc::clone(entry);
        // Each lock is taken on its own here, never two at once.
        let pending = self.store.submit_then(ops, move |committed| {
            for (queue, accepted) in &targets {
                let mut state = queue.lock();
                if committed.is_ok() && !state.deleted {
                    // Only now, durable, do the copies become receivable (listeners woken).
                    state.commit_sent(accepted);
                } else {
                    state.abandon_sent(accepted);
                }
            }
            let mut topic = topic_entry.lock();
            if committed.is_ok() {
                topic.commit(&accepted_ids, &counts);
            } else {
                topic.abandon(&accepted_ids);
            }
        });
        Ok(Submitted {
            answers,
            awaited,
            pending: Some(pending),
        })
    }
}

/// Decides, in order, which publications are new (numbered on FIFO topics) and which are
/// duplicates: of a publication accepted within the window, or of one earlier in this call
/// (which commits with it). Changes nothing: [`TopicState::accept`] records them.
fn plan(state: &TopicState, publications: &[Publication], fifo: bool, now: Millis) -> Vec<Plan> {
    let mut next = state.next_seq();
    let mut earlier: HashMap<&str, (&str, u64)> = HashMap::new();
    let mut plans = Vec::with_capacity(publications.len());
    for p in publications {
        if !fifo {
            plans.push(Plan::New { seq: None });
            continue;
        }
        if let Some(id) = p.deduplication_id.as_deref() {
            if let Some(original) = state.find(id, now) {
                plans.push(Plan::Duplicate {
                    id: id.to_owned(),
                    message_id: original.message_id.clone(),
                    seq: original.seq,
                    committed: original.committed,
                });
                continue;
            }
            if let Some(&(message_id, seq)) = earlier.get(id) {
                plans.push(Plan::Duplicate {
                    id: id.to_owned(),
                    message_id: message_id.to_owned(),
                    seq,
                    committed: true,
                });
                continue;
            }
            earlier.insert(id, (&p.message_id, next));
        }
        plans.push(Plan::New { seq: Some(next) });
        next += 1;
    }
    plans
}

/// Every copy of every new publication, rendered and encoded (none for a duplicate).
fn render_all(
    publications: &[Publication],
    plans: &[Plan],
) -> Result<Vec<Vec<Rendered>>, EngineError> {
    publications
        .iter()
        .zip(plans)
        .map(|(p, plan)| match plan {
            Plan::Duplicate { .. } => Ok(Vec::new()),
            Plan::New { seq } => p
                .deliveries
                .iter()
                .map(|delivery| {
                    let copy = p.render(delivery, *seq);
                    let size = copy.size();
                    let body = encode(&BodyRecord {
                        body: copy.body,
                        attributes: copy.attributes,
                    })?;
                    Ok(Rendered {
                        body,
                        size,
                        payload: copy.payload,
                    })
                })
                .collect(),
        })
        .collect()
}

/// Where one copy may go: its queue and its dead-letter queue, each with the copy's meta
/// record there and its index entry (seq still to be given); `None` for a queue that is missing
/// (or was deleted since the lookup).
#[derive(Default)]
struct Destinations {
    queue: Option<(usize, Vec<u8>, Accepted)>,
    dead_letter_queue: Option<(usize, Vec<u8>, Accepted)>,
}

/// The destinations of every copy, per publication and delivery (none for a duplicate): each
/// queue's delay and kind shape the copy's record there.
fn encode_metas(
    locked: &mut LockedQueues<'_>,
    publications: &[Publication],
    plans: &[Plan],
    bodies: &[Vec<Rendered>],
    now: Millis,
) -> Result<Vec<Vec<Destinations>>, EngineError> {
    let mut all = Vec::with_capacity(publications.len());
    for ((p, plan), copies) in publications.iter().zip(plans).zip(bodies) {
        let mut per_copy = Vec::with_capacity(copies.len());
        if let Plan::New { .. } = plan {
            for (delivery, copy) in p.deliveries.iter().zip(copies) {
                let mut d = Destinations::default();
                if let Some(i) = locked.live(&delivery.queue) {
                    let (meta, index) = copy_record(locked.state(i), p, delivery, copy, now)?;
                    d.queue = Some((i, meta, index));
                }
                let dlq = delivery.dead_letter_queue.as_ref();
                if let Some(i) = dlq.and_then(|name| locked.live(name)) {
                    let (meta, index) = copy_record(locked.state(i), p, delivery, copy, now)?;
                    d.dead_letter_queue = Some((i, meta, index));
                }
                per_copy.push(d);
            }
        }
        all.push(per_copy);
    }
    Ok(all)
}

/// A copy as stored in `queue`: a new message, sent now, visible after the queue's delay; in a
/// FIFO queue in the publication's group with its deduplication id.
fn copy_record(
    queue: &QueueState,
    p: &Publication,
    delivery: &Delivery,
    copy: &Rendered,
    now: Millis,
) -> Result<(Vec<u8>, Accepted), EngineError> {
    let fifo = queue.is_fifo();
    let visible_at = now.saturating_add(Millis::from(queue.config.delay_seconds) * 1000);
    let meta = encode(&MetaRecord {
        sent_at: now,
        visible_at,
        size: copy.size as u64,
        message_id: delivery.message_id.clone(),
        group_id: p.group_id.clone().filter(|_| fifo),
        deduplication_id: p.deduplication_id.clone().filter(|_| fifo),
        dead_letter: None,
    })?;
    let index = Accepted {
        seq: 0,
        sent_at: now,
        visible_at,
        size: u32::try_from(copy.size).unwrap_or(u32::MAX),
        group: fifo.then(|| p.group_id.clone().unwrap_or_default()),
        // Copies meet no queue-level deduplication, and record none.
        dedup: None,
    };
    Ok((meta, index))
}

/// A copy a queue took: which (its index among the locked ones), its meta record, and its index
/// entry with its seq there.
struct Admitted {
    queue: usize,
    meta: Vec<u8>,
    index: Accepted,
}

/// Admits one copy of `size` bytes into its queue (unless missing, too small or full), or else
/// into its dead-letter queue (which takes it whatever its depth, as a dead-letter move);
/// answers the outcome and, if a queue took it, where.
fn admit(
    locked: &mut LockedQueues<'_>,
    destinations: Destinations,
    size: usize,
) -> (DeliveryOutcome, Option<Admitted>) {
    let failure = match destinations.queue {
        None => DeliveryFailure::QueueMissing,
        Some((i, meta, mut index)) => {
            let queue = locked.state(i);
            if size > queue.config.max_message_bytes as usize {
                DeliveryFailure::TooLarge
            } else if let Some(seq) = queue.reserve_one() {
                index.seq = seq;
                let admitted = Admitted {
                    queue: i,
                    meta,
                    index,
                };
                return (DeliveryOutcome::Delivered, Some(admitted));
            } else {
                DeliveryFailure::QueueFull
            }
        }
    };
    let Some((i, meta, mut index)) = destinations.dead_letter_queue else {
        return (DeliveryOutcome::Failed(failure), None);
    };
    let Some(&seq) = locked.state(i).reserve_arrivals(1).first() else {
        return (DeliveryOutcome::Failed(failure), None);
    };
    index.seq = seq;
    let admitted = Admitted {
        queue: i,
        meta,
        index,
    };
    (DeliveryOutcome::DeadLettered(failure), Some(admitted))
}

/// The destination queues of a call, locked.
struct LockedQueues<'a> {
    /// The index in `guards` of each queue by name.
    by_name: HashMap<&'a QueueName, usize>,
    guards: Vec<(&'a Arc<QueueEntry>, QueueGuard<'a>)>,
}

impl<'a> LockedQueues<'a> {
    /// Locks them all in the one fixed order moves use too (by address, see
    /// [`Locked`](crate::ops::transfer::Locked)), so a publish and a move, or two publishes,
    /// can never each hold a lock the other waits for. Each queue once, however many
    /// deliveries name it (as their queue or their dead-letter queue).
    fn lock(queues: &'a BTreeMap<QueueName, Arc<QueueEntry>>) -> Self {
        let mut order: Vec<(&'a QueueName, &'a Arc<QueueEntry>)> = queues.iter().collect();
        order.sort_by_key(|(_, entry)| Arc::as_ptr(entry) as usize);
        let mut by_name = HashMap::with_capacity(order.len());
        let mut guards = Vec::with_capacity(order.len());
        for (name, entry) in order {
            by_name.insert(name, guards.len());
            guards.push((entry, entry.lock()));
        }
        Self { by_name, guards }
    }

    /// The index of the queue `name`, unless it is missing or was deleted since the lookup.
    fn live(&self, name: &QueueName) -> Option<usize> {
        let &i = self.by_name.get(name)?;
        (!self.guards.get(i)?.1.deleted).then_some(i)
    }

    /// The state of a queue [`live`](Self::live) answered.
    fn state(&mut self, i: usize) -> &mut QueueState {
        &mut self.guards[i].1
    }

    fn get(&mut self, i: usize) -> (&'a Arc<QueueEntry>, &mut QueueState) {
        let (entry, state) = &mut self.guards[i];
        (*entry, state)
    }
}
