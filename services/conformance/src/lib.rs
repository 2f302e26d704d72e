//! The conformance suite: every guarantee of `product.md` that lives below the gateway, written
//! once as generic case functions over the [`Engine`] trait and expanded per engine by
//! [`engine_suite!`]. An engine is done when the whole suite passes on it. The cases live in
//! one module per capability of the engine boundary (`cases/tenants.rs`, `queues.rs`,
//! `messages.rs`, `payloads.rs`, `stored_bytes.rs`, `upkeep.rs`) plus `cases/fifo.rs` for what FIFO queues add.
//!
//! Each case gets a fresh engine from the factory, a [`ManualClock`] (time moves only when the
//! case says so) and a tenant of its own, so cases can run in parallel against one shared store.
//!
//! ```ignore
//! async fn make() -> sluice_conformance::TestEngine { /* open a fresh engine */ }
//! sluice_conformance::engine_suite!(make);
//! // Or, with bodies spilled to a payload store (see `spill`):
//! sluice_conformance::engine_suite!(make, spill_to = sluice_conformance::spill::local_store);
//! ```
//!
//! [`spill`] runs the same cases with payload spill on: the engine keeps references, a payload
//! store (local folder or S3) the bodies.
//!
//! [`fifo_concurrency`] is the one long-running case, run by each engine's own test with as
//! many engines over one store as the engine allows.

pub mod cases;
pub mod fifo_concurrency;
pub mod spill;

use sluice_engine::{Engine, ManualClock, TenantId};
use sluice_services::{Limits, Services};
use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What a factory hands the suite: the engine and whatever must live as long as it (a
/// temporary directory, a server process).
pub struct TestEngine {
    /// The engine under test.
    pub engine: Arc<dyn Engine>,
    /// Dropped after the case.
    pub guard: Box<dyn Any + Send>,
}

/// Everything a case needs.
pub struct Ctx {
    /// The engine under test.
    pub engine: Arc<dyn Engine>,
    /// Services over that engine and the manual clock.
    pub services: Services,
    /// The clock; advance it to move time.
    pub clock: ManualClock,
    /// A tenant no other case uses.
    pub tenant: TenantId,
    /// A second tenant, for isolation checks.
    pub other_tenant: TenantId,
    _guard: Box<dyn Any + Send>,
}

/// The instant every case's clock starts at (2026-01-01T00:00:00Z).
pub const START: u64 = 1_767_225_600_000;

impl Ctx {
    /// Wraps a fresh engine for one case.
    pub fn new(test_engine: TestEngine) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let unique = format!("{}-{n}", std::process::id());
        let clock = ManualClock::new(START);
        let services = Services::new(
            test_engine.engine.clone(),
            Arc::new(clock.clone()),
            Limits::default(),
        );
        Self {
            engine: test_engine.engine,
            services,
            clock,
            tenant: TenantId::parse(&format!("t-{unique}")).unwrap_or_else(|e| panic!("{e}")),
            other_tenant: TenantId::parse(&format!("u-{unique}")).unwrap_or_else(|e| panic!("{e}")),
            _guard: test_engine.guard,
        }
    }
}

/// Expands to one `#[tokio::test]` per case, each calling the case with a fresh engine from
/// `$make` (an async function returning [`TestEngine`]).
///
/// `engine_suite!(make, spill_to = store)` runs the same cases with payload spill on: each
/// over a [`spill::SpillingEngine`] around a fresh engine and a fresh store from `store` (an
/// async function returning [`spill::TestStore`]), plus
/// [`spill::spilled_messages_keep_only_references`]. The payload cases, which hand the engine
/// references themselves, run only in the plain form.
#[macro_export]
macro_rules! engine_suite {
    ($make:path) => {
        $crate::engine_suite!(@list plain ($make));
    };
    ($make:path, spill_to = $store:path) => {
        $crate::engine_suite!(@list spill ($make, $store));
    };
    // The one case list: every case, then those that only the plain form runs.
    (@list $form:ident ($($args:tt)*)) => {
        $crate::engine_suite!(@$form ($($args)*) [
            // Tenants (cases/tenants.rs)
            tenant_administration,
            tenant_deletion_races_queue_creation,
            deleted_tenant_refuses_tokens_issued_before,
            // Queues (cases/queues.rs)
            put_replaces_config_and_keeps_messages,
            patch_changes_only_given_fields,
            list_queues_pages_by_name_with_prefix,
            delete_queue_removes_messages_and_handles,
            stats_count_each_state,
            max_queues_holds_under_concurrent_creation,
            tenants_cannot_reach_each_others_queues,
            invalid_input_changes_nothing,
            // Messages (cases/messages.rs)
            send_receive_delete,
            visibility_expiry_redelivers_with_counts,
            change_visibility_extends_and_zero_makes_visible,
            receipt_handles_stale_invalid_and_idempotent_delete,
            altered_or_invented_handles_are_invalid,
            queue_delay_and_message_delay,
            deliver_at_schedules_delivery,
            purge_removes_every_state,
            long_poll_is_woken_by_a_send,
            long_poll_answers_empty_after_wait,
            long_poll_returns_a_delayed_message_when_its_delay_ends,
            max_depth_refuses_excess_sends,
            batch_entries_fail_alone,
            peek_changes_nothing,
            // Transfers (cases/dead_letters.rs)
            receives_past_max_receive_count_move_to_the_dead_letter_queue,
            dead_letter_queue_full_missing_or_still_referenced,
            dead_letter_on_request_moves_at_once,
            fifo_dead_letters_keep_group_order,
            redrive_moves_dead_letters_back,
            retry_backoff_spaces_redeliveries,
            redrive_policies_are_validated,
            dead_letters_expire_from_their_original_send,
            redrive_task_moves_what_was_there_and_completes,
            redrive_task_keeps_its_rate_lease_and_cancel,
            // Records (cases/records.rs)
            records_are_compare_and_set,
            message_seqs_walk_a_queue_in_order,
            // Publishing (cases/publishing.rs)
            publish_delivers_one_copy_per_delivery,
            publish_failures_stay_with_their_delivery,
            copies_follow_their_queue_and_tenant,
            fifo_topic_sequence_numbers_and_deduplication,
            fifo_topic_order_holds_under_concurrent_publishers,
            deleting_a_topic_forgets_its_state,
            // Stored bytes (cases/stored_bytes.rs)
            stored_bytes_follow_every_add_and_removal,
            // Upkeep (cases/upkeep.rs)
            retention_expires_messages,
            // FIFO queues (cases/fifo.rs)
            fifo_send_rules_and_sequence_numbers,
            fifo_deduplication_window,
            fifo_deduplication_scope_and_content,
            fifo_group_order_and_locking,
            fifo_groups_are_served_oldest_head_first,
            fifo_receive_attempt_id_returns_the_same_answer,
        ] [
            // Payloads (cases/payloads.rs)
            payload_refs_travel_with_their_message,
            payload_events_follow_adds_and_releases,
            payload_event_acks_are_idempotent,
        ]);
    };
    (@plain ($make:path) [$($case:ident),* $(,)?] [$($plain_only:ident),* $(,)?]) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let ctx = $crate::Ctx::new($make().await);
                $crate::cases::$case(ctx).await;
            }
        )*
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $plain_only() {
                let ctx = $crate::Ctx::new($make().await);
                $crate::cases::$plain_only(ctx).await;
            }
        )*
    };
    (@spill ($make:path, $store:path) [$($case:ident),* $(,)?] [$($plain_only:ident),* $(,)?]) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let (engine, _) = $crate::spill::spilling($make().await, $store().await);
                $crate::cases::$case($crate::Ctx::new(engine)).await;
            }
        )*

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn spilled_messages_keep_only_references() {
            let (engine, spilling) = $crate::spill::spilling($make().await, $store().await);
            $crate::spill::spilled_messages_keep_only_references($crate::Ctx::new(engine), spilling)
                .await;
        }
    };
}
