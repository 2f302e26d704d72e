//! One module per engine operation (or per family of tiny ones), each an inherent method of
//! [`EmbeddedEngine`](crate::EmbeddedEngine) that the trait impls in `lib.rs` delegate to.

mod change_visibility;
mod dead_letter;
mod delete;
mod delete_queue;
mod delete_tenant;
mod ensure_tenant;
mod expire;
mod list_queues;
mod listen;
mod message_seqs;
mod payload_events;
mod peek;
mod publish;
mod purge;
mod put_queue;
mod queue_info;
mod receive;
mod records;
mod redrive;
mod send;
mod tenants;
mod topics;
mod transfer;
