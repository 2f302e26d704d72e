//! Model test: random sequences of send / receive / delete / change visibility / time passing /
//! engine re-open, run against [`EmbeddedEngine`] and a tiny in-memory model of one queue. After
//! every step both must agree on what was answered and on the queue's contents.
//!
//! The model encodes the engine's documented contract: messages become receivable in
//! `(visible_at, seq)` order; an expired message is gone (deleting it with any handle succeeds,
//! changing its visibility is stale); a re-open keeps every acknowledged message but forgets
//! receive bookkeeping (visible again at its sent `visible_at`, count 0, old handles stale).

use proptest::prelude::*;
use sluice_embedded::{EmbeddedEngine, EmbeddedOptions};
use sluice_engine::{
    HandleError, MessageState, Messages, Millis, NewMessage, QueueConfig, QueueKey, QueueName,
    QueueStats, Queues, ReceiptHandle, TenantId,
};
use std::collections::BTreeMap;
use std::path::Path;

const RETENTION_SECONDS: u32 = 60;
const START: Millis = 1_000_000;

#[derive(Debug, Clone)]
enum Op {
    /// A message delayed by this many seconds.
    Send {
        delay: u32,
    },
    Receive {
        max: usize,
        vt: u32,
    },
    /// Handles chosen by index among every handle issued so far (modulo their count).
    Delete {
        handles: Vec<usize>,
    },
    ChangeVisibility {
        entries: Vec<(usize, u32)>,
    },
    /// An issued handle with another queue's uid, or text that is no handle at all.
    Foreign {
        handle: usize,
        garbage: bool,
    },
    Advance {
        ms: Millis,
    },
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u32..=3).prop_map(|delay| Op::Send { delay }),
        4 => (1usize..=3, 0u32..=5).prop_map(|(max, vt)| Op::Receive { max, vt }),
        3 => prop::collection::vec(any::<usize>(), 1..=3)
            .prop_map(|handles| Op::Delete { handles }),
        2 => prop::collection::vec((any::<usize>(), 0u32..=5), 1..=2)
            .prop_map(|entries| Op::ChangeVisibility { entries }),
        1 => (any::<usize>(), any::<bool>())
            .prop_map(|(handle, garbage)| Op::Foreign { handle, garbage }),
        // Whole half-seconds, so deadlines often coincide with `now` exactly.
        3 => (0u64..=20).prop_map(|half_seconds| Op::Advance { ms: half_seconds * 500 }),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Debug, Clone)]
struct ModelMsg {
    body: String,
    sent_at: Millis,
    sent_visible_at: Millis,
    visible_at: Millis,
    receive_count: u32,
    /// Index (in `Model::issued`) of the handle of the current delivery.
    delivery: Option<usize>,
}

#[derive(Debug, Default)]
struct Model {
    now: Millis,
    /// In send (= seq) order.
    messages: Vec<ModelMsg>,
    /// Every handle the engine issued, with the body it was issued for.
    issued: Vec<(String, String)>,
}

impl Model {
    fn retention(&self) -> Millis {
        Millis::from(RETENTION_SECONDS) * 1000
    }

    /// Expired messages are gone for every purpose; dropping them early changes no answer.
    fn forget_expired(&mut self) {
        let (now, retention) = (self.now, self.retention());
        self.messages.retain(|m| m.sent_at + retention > now);
    }

    fn position(&self, handle: usize) -> Option<usize> {
        let body = &self.issued[handle].1;
        self.messages.iter().position(|m| &m.body == body)
    }

    fn receive(&mut self, max: usize, vt: u32) -> Vec<(String, u32)> {
        let now = self.now;
        let mut order: Vec<usize> = (0..self.messages.len())
            .filter(|&i| self.messages[i].visible_at <= now)
            .collect();
        // Stable sort: equal `visible_at` keep seq order.
        order.sort_by_key(|&i| self.messages[i].visible_at);
        order.truncate(max);
        order
            .into_iter()
            .map(|i| {
                let m = &mut self.messages[i];
                m.visible_at = now + Millis::from(vt) * 1000;
                m.receive_count += 1;
                (m.body.clone(), m.receive_count)
            })
            .collect()
    }

    fn next_visible_at(&self) -> Option<Millis> {
        let retention = self.retention();
        self.messages
            .iter()
            .filter(|m| m.visible_at > self.now && m.sent_at + retention > m.visible_at)
            .map(|m| m.visible_at)
            .min()
    }

    fn delete(&mut self, handle: usize) -> Result<(), HandleError> {
        match self.position(handle) {
            None => Ok(()),
            Some(i) if self.messages[i].delivery == Some(handle) => {
                self.messages.remove(i);
                Ok(())
            }
            Some(_) => Err(HandleError::Stale),
        }
    }

    fn change_visibility(&mut self, handle: usize, timeout: u32) -> Result<(), HandleError> {
        match self.position(handle) {
            Some(i) if self.messages[i].delivery == Some(handle) => {
                self.messages[i].visible_at = self.now + Millis::from(timeout) * 1000;
                Ok(())
            }
            _ => Err(HandleError::Stale),
        }
    }

    fn reopen(&mut self) {
        for m in &mut self.messages {
            m.visible_at = m.sent_visible_at;
            m.receive_count = 0;
            m.delivery = None;
        }
    }

    fn state_of(&self, m: &ModelMsg) -> MessageState {
        if m.visible_at <= self.now {
            MessageState::Visible
        } else if m.receive_count > 0 {
            MessageState::InFlight
        } else {
            MessageState::Delayed
        }
    }

    fn stats(&self) -> QueueStats {
        let mut stats = QueueStats {
            oldest_sent_at: self.messages.first().map(|m| m.sent_at),
            ..QueueStats::default()
        };
        for m in &self.messages {
            stats.stored_bytes += m.body.len() as u64;
            match self.state_of(m) {
                MessageState::Visible => stats.visible += 1,
                MessageState::InFlight => stats.in_flight += 1,
                MessageState::Delayed => stats.delayed += 1,
            }
        }
        stats
    }

    fn peek(&self, state: MessageState) -> Vec<(String, u32)> {
        self.messages
            .iter()
            .filter(|m| self.state_of(m) == state)
            .map(|m| (m.body.clone(), m.receive_count))
            .collect()
    }
}

fn open(dir: &Path) -> EmbeddedEngine {
    EmbeddedEngine::open(dir, EmbeddedOptions::default()).expect("open the engine")
}

async fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let key = QueueKey::new(
        TenantId::parse("t").expect("tenant"),
        QueueName::parse("q").expect("name"),
    );
    let mut config = QueueConfig::with_defaults(262_144);
    config.message_retention_seconds = RETENTION_SECONDS;
    let mut engine = open(dir.path());
    engine
        .put_queue(&key, config, START)
        .await
        .expect("put_queue");
    let mut model = Model {
        now: START,
        ..Model::default()
    };
    let mut sent = 0usize;

    for (step, op) in ops.into_iter().enumerate() {
        let now = model.now;
        match op {
            Op::Send { delay } => {
                let body = format!("m{sent}");
                sent += 1;
                let visible_at = now + Millis::from(delay) * 1000;
                let answers = engine
                    .send(
                        &key,
                        vec![NewMessage {
                            payload: None,
                            message_id: format!("id-{body}"),
                            body: body.clone(),
                            attributes: BTreeMap::new(),
                            visible_at,
                            group_id: None,
                            deduplication_id: None,
                        }],
                        now,
                    )
                    .await
                    .expect("send");
                assert!(answers[0].is_ok(), "step {step}: send refused");
                model.messages.push(ModelMsg {
                    body,
                    sent_at: now,
                    sent_visible_at: visible_at,
                    visible_at,
                    receive_count: 0,
                    delivery: None,
                });
            }
            Op::Receive { max, vt } => {
                let outcome = engine
                    .receive(&key, max, vt, None, now)
                    .await
                    .expect("receive");
                let got: Vec<(String, u32)> = outcome
                    .messages
                    .iter()
                    .map(|r| (r.message.body.clone(), r.message.receive_count))
                    .collect();
                let expected = model.receive(max, vt);
                assert_eq!(got, expected, "step {step}: receive({max}, {vt})");
                for r in outcome.messages {
                    assert_eq!(r.message.message_id, format!("id-{}", r.message.body));
                    let index = model.issued.len();
                    model
                        .issued
                        .push((r.receipt_handle, r.message.body.clone()));
                    if let Some(m) = model.messages.iter_mut().find(|m| m.body == r.message.body) {
                        m.delivery = Some(index);
                    }
                }
                assert_eq!(
                    outcome.next_visible_at,
                    model.next_visible_at(),
                    "step {step}: next_visible_at"
                );
            }
            Op::Delete { handles } => {
                if model.issued.is_empty() {
                    continue;
                }
                let picked: Vec<usize> = handles.iter().map(|h| h % model.issued.len()).collect();
                let texts: Vec<String> =
                    picked.iter().map(|&h| model.issued[h].0.clone()).collect();
                let got = engine.delete(&key, &texts, now).await.expect("delete");
                let expected: Vec<_> = picked.iter().map(|&h| model.delete(h)).collect();
                assert_eq!(got, expected, "step {step}: delete {picked:?}");
            }
            Op::ChangeVisibility { entries } => {
                if model.issued.is_empty() {
                    continue;
                }
                let picked: Vec<(usize, u32)> = entries
                    .iter()
                    .map(|&(h, t)| (h % model.issued.len(), t))
                    .collect();
                let request: Vec<(String, u32)> = picked
                    .iter()
                    .map(|&(h, t)| (model.issued[h].0.clone(), t))
                    .collect();
                let got = engine
                    .change_visibility(&key, &request, now)
                    .await
                    .expect("change_visibility");
                let expected: Vec<_> = picked
                    .iter()
                    .map(|&(h, t)| model.change_visibility(h, t))
                    .collect();
                assert_eq!(got, expected, "step {step}: change_visibility {picked:?}");
            }
            Op::Foreign { handle, garbage } => {
                let text = if garbage || model.issued.is_empty() {
                    "not a receipt handle".to_owned()
                } else {
                    let real = &model.issued[handle % model.issued.len()].0;
                    let mut decoded =
                        ReceiptHandle::decode(real, engine.handle_key()).expect("an issued handle");
                    decoded.queue_uid ^= 1;
                    decoded.encode(engine.handle_key())
                };
                let got = engine
                    .delete(&key, std::slice::from_ref(&text), now)
                    .await
                    .expect("delete");
                assert_eq!(got, vec![Err(HandleError::Invalid)], "step {step}");
                let got = engine
                    .change_visibility(&key, &[(text, 0)], now)
                    .await
                    .expect("change_visibility");
                assert_eq!(got, vec![Err(HandleError::Invalid)], "step {step}");
            }
            Op::Advance { ms } => model.now += ms,
            Op::Reopen => {
                drop(engine);
                engine = open(dir.path());
                model.reopen();
            }
        }

        model.forget_expired();
        let now = model.now;
        let info = engine
            .get_queue(&key, now)
            .await
            .expect("get_queue")
            .expect("the queue exists");
        assert_eq!(info.stats, model.stats(), "step {step}: stats");
        for state in [
            MessageState::Visible,
            MessageState::InFlight,
            MessageState::Delayed,
        ] {
            let peeked: Vec<(String, u32)> = engine
                .peek(&key, state, 1000, now)
                .await
                .expect("peek")
                .into_iter()
                .map(|m| (m.body, m.receive_count))
                .collect();
            assert_eq!(peeked, model.peek(state), "step {step}: peek {state:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        ..ProptestConfig::default()
    })]

    #[test]
    fn engine_agrees_with_the_model(ops in prop::collection::vec(op(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(run(ops));
    }
}
