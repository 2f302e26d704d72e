//! One file per engine operation, each beside the Lua script it runs (`<operation>.rs` next to
//! `<operation>.lua`, built by `scripts.rs`): the operation's body as an inherent method of
//! [`RedisEngine`](crate::RedisEngine), which the trait impls in `lib.rs` call. Operations
//! without a script of their own share a family file (`tenants.rs`, `queues.rs`, `ping.rs`);
//! `calls.rs` and `handles.rs` hold what several operations share.

mod calls;
mod change_visibility;
mod delete;
mod delete_queue;
mod expire;
pub(crate) mod fanout;
mod fanout_ack;
mod fanout_apply;
mod fanout_pending;
mod fanout_registry;
mod handles;
mod message_seqs;
pub(crate) mod payload_events;
mod peek;
mod ping;
mod publish;
mod purge;
mod put_queue;
mod queue_info;
mod queues;
mod rate_limit;
mod receive;
mod records;
mod register_queue;
mod send;
mod subscription_stats;
mod tenant_delete;
mod tenant_put;
mod tenants;
mod topic_delete;
mod transfer_apply;
mod transfer_out;
mod transfer_registry;
mod transfer_revert;
mod transfer_settle;
pub(crate) mod transfers;
mod unregister_queue;
