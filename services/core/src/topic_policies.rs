//! Filter matching for publishes: each subscription's policy compiled once per version of the
//! topic's record and cached ([`PolicyCache`]), and a message matched against all of a
//! topic's subscriptions with its body parsed at most once ([`Matchable`]).
//!
//! The cache is checked against the record's subscriptions, not its version alone: a deleted
//! and re-created topic's record starts its versions again. Matching costs about the size of
//! the message plus the policies' (see `sluice-filter`), so it runs inline, except that a
//! large body matched against body-scope policies is matched on a blocking thread
//! ([`BLOCKING_MATCH_BYTES`]), never holding an async worker that other tenants' requests
//! wait on.

use crate::topics::{PublishRequest, SubscriptionRecord, TopicRecord};
use sluice_engine::{MessageAttribute, TopicKey};
use sluice_filter::{AttributeRef, FilterPolicy, FilterScope, MessageAttributes};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// Bodies at least this large are matched against body-scope policies on a blocking thread:
/// the cost is linear, but a body of megabytes still takes milliseconds of CPU.
pub(crate) const BLOCKING_MATCH_BYTES: usize = 64 * 1024;

/// Whether matching `request` against `subscriptions` belongs on a blocking thread.
pub(crate) fn heavy_match(
    subscriptions: &[CompiledSubscription],
    request: &PublishRequest,
) -> bool {
    request.body.len() >= BLOCKING_MATCH_BYTES
        && subscriptions.iter().any(|s| {
            s.policy
                .as_ref()
                .is_some_and(|p| p.scope() == FilterScope::Body)
        })
}

/// A subscription ready to match messages: its policy compiled.
pub(crate) struct CompiledSubscription {
    pub(crate) record: SubscriptionRecord,
    pub(crate) policy: Option<FilterPolicy>,
}

/// Compiled subscriptions of one topic record version.
struct CompiledTopic {
    version: u64,
    subscriptions: Arc<Vec<CompiledSubscription>>,
}

impl CompiledTopic {
    /// Whether this was compiled from `record` at `version`. The version alone does not say
    /// so: a deleted and re-created topic's record starts its versions again, so the same
    /// version may hold another incarnation's subscriptions. Their records do say so (every
    /// subscription has a random id), and comparing them costs no more than the parse of the
    /// record that every publish already does.
    fn compiled_from(&self, version: u64, record: &TopicRecord) -> bool {
        self.version == version
            && self.subscriptions.len() == record.subscriptions.len()
            && self
                .subscriptions
                .iter()
                .zip(&record.subscriptions)
                .all(|(compiled, stored)| compiled.record == *stored)
    }
}

/// Compiled filter policies by topic, so a publish re-parses nothing unless the topic's
/// subscriptions changed since (in any way, a re-creation of the topic included).
#[derive(Default, Clone)]
pub(crate) struct PolicyCache(Arc<Mutex<HashMap<TopicKey, CompiledTopic>>>);

impl PolicyCache {
    pub(crate) fn compiled(
        &self,
        topic: &TopicKey,
        version: u64,
        record: &TopicRecord,
    ) -> Arc<Vec<CompiledSubscription>> {
        let mut cache = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(cached) = cache
            .get(topic)
            .filter(|c| c.compiled_from(version, record))
        {
            return cached.subscriptions.clone();
        }
        let subscriptions: Arc<Vec<CompiledSubscription>> = Arc::new(
            record
                .subscriptions
                .iter()
                .map(|s| CompiledSubscription {
                    record: s.clone(),
                    // Stored policies were validated when they were written.
                    policy: s
                        .filter_policy
                        .as_ref()
                        .and_then(|p| FilterPolicy::parse(p, s.filter_policy_scope).ok()),
                })
                .collect(),
        );
        // Bounded: a cache of every topic ever published to would grow without limit.
        if cache.len() >= 10_000 {
            cache.clear();
        }
        cache.insert(
            topic.clone(),
            CompiledTopic {
                version,
                subscriptions: subscriptions.clone(),
            },
        );
        subscriptions
    }
}

/// A message's attributes as the filter library reads them, without copying them.
struct FilterAttributes<'a>(&'a BTreeMap<String, MessageAttribute>);

impl MessageAttributes for FilterAttributes<'_> {
    fn attribute(&self, name: &str) -> Option<AttributeRef<'_>> {
        self.0.get(name).map(|a| AttributeRef {
            data_type: &a.data_type,
            value: &a.value,
        })
    }
}

/// A message ready to be matched by every subscription of a topic: its body is parsed at most
/// once per publish, however many body-scope policies look at it.
pub(crate) struct Matchable<'a> {
    attributes: FilterAttributes<'a>,
    body: &'a str,
    parsed_body: std::cell::OnceCell<Option<serde_json::Value>>,
}

impl<'a> Matchable<'a> {
    pub(crate) fn new(message: &'a PublishRequest) -> Self {
        Self {
            attributes: FilterAttributes(&message.attributes),
            body: &message.body,
            parsed_body: std::cell::OnceCell::new(),
        }
    }

    pub(crate) fn matches(&self, subscription: &CompiledSubscription) -> bool {
        let Some(policy) = &subscription.policy else {
            return true;
        };
        match policy.scope() {
            FilterScope::Attributes => policy.matches_attributes(&self.attributes),
            // A body that is not JSON matches no body-scope policy.
            FilterScope::Body => self
                .parsed_body
                .get_or_init(|| serde_json::from_str(self.body).ok())
                .as_ref()
                .is_some_and(|body| policy.matches_body_json(body)),
        }
    }
}
