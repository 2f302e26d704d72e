//! The Lua scripts, one per operation, each in `ops/<operation>.lua` (beside the Rust side
//! that calls it, `ops/<operation>.rs`) opening with its `KEYS`/`ARGV` contract. This module
//! owns how they are built: queue scripts get the shared prelude `ops/queue.lua` (key names,
//! helpers) prepended at compile time. Each script is hashed once per process; calls
//! go by `EVALSHA` and a script is (re)loaded only when Redis answers `NOSCRIPT` (see
//! [`Redis::eval`](crate::conn::Redis::eval)).

use redis::Script;
use std::sync::LazyLock;

// The first line of each script is its Redis 7 shebang. `allow-oom` goes on scripts that free
// memory or grow it by a few bytes at most (receive bookkeeping, deletions, expiry), so that
// consumers can still receive and delete, and so drain a Redis that hit `maxmemory`; scripts
// that store messages or queues have no such flag and are refused before they change anything
// (`OOM`, answered as `Unavailable`). Read-only scripts are `no-writes`.
macro_rules! queue_script {
    ($name:ident, $shebang:literal, $file:literal) => {
        pub(crate) static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(concat!(
                $shebang,
                "\n",
                include_str!("ops/queue.lua"),
                include_str!(concat!("ops/", $file))
            ))
        });
    };
}

macro_rules! registry_script {
    ($name:ident, $shebang:literal, $file:literal) => {
        pub(crate) static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(concat!(
                $shebang,
                "\n",
                include_str!(concat!("ops/", $file))
            ))
        });
    };
}

queue_script!(PUT_QUEUE, "#!lua", "put_queue.lua");
queue_script!(QUEUE_INFO, "#!lua flags=no-writes", "queue_info.lua");
queue_script!(DELETE_QUEUE, "#!lua flags=allow-oom", "delete_queue.lua");
queue_script!(PURGE, "#!lua flags=allow-oom", "purge.lua");
queue_script!(SEND, "#!lua", "send.lua");
queue_script!(RECEIVE, "#!lua flags=allow-oom", "receive.lua");
queue_script!(DELETE, "#!lua flags=allow-oom", "delete.lua");
queue_script!(
    CHANGE_VISIBILITY,
    "#!lua flags=allow-oom",
    "change_visibility.lua"
);
queue_script!(PEEK, "#!lua flags=no-writes", "peek.lua");
queue_script!(MESSAGE_SEQS, "#!lua flags=no-writes", "message_seqs.lua");
queue_script!(EXPIRE, "#!lua flags=allow-oom", "expire.lua");
// A move's steps may not be refused half way for memory: the intent frees what it records,
// the apply adds what the intent freed elsewhere, a revert restores it.
queue_script!(TRANSFER_OUT, "#!lua flags=allow-oom", "transfer_out.lua");
queue_script!(
    TRANSFER_APPLY,
    "#!lua flags=allow-oom",
    "transfer_apply.lua"
);
queue_script!(
    TRANSFER_REVERT,
    "#!lua flags=allow-oom",
    "transfer_revert.lua"
);
// Settling a deleted source's "maybe released" entries (ops/payload_events.rs) adds an id
// and an event at most: like a deletion, it must drain a Redis at `maxmemory`.
queue_script!(
    TRANSFER_SETTLE,
    "#!lua flags=allow-oom",
    "transfer_settle.lua"
);
registry_script!(
    TRANSFER_REGISTER,
    "#!lua flags=allow-oom",
    "transfer_register.lua"
);
registry_script!(TRANSFER_DUE, "#!lua flags=no-writes", "transfer_due.lua");
registry_script!(
    TRANSFER_UNREGISTER,
    "#!lua flags=allow-oom",
    "transfer_unregister.lua"
);
// Fan-outs (ops/fanout.rs). Topic scripts take a topic's keys and no prelude. The commit
// stores publications: refused under OOM before it changes anything. An apply adds copies
// like a send does; the ack and a topic's deletion only free memory.
registry_script!(PUBLISH, "#!lua", "publish.lua");
queue_script!(FANOUT_APPLY, "#!lua", "fanout_apply.lua");
registry_script!(FANOUT_ACK, "#!lua flags=allow-oom", "fanout_ack.lua");
registry_script!(
    FANOUT_PENDING,
    "#!lua flags=no-writes",
    "fanout_pending.lua"
);
registry_script!(
    FANOUT_REGISTER,
    "#!lua flags=allow-oom",
    "fanout_register.lua"
);
registry_script!(TOPIC_DELETE, "#!lua flags=allow-oom", "topic_delete.lua");
registry_script!(REGISTER_QUEUE, "#!lua", "register_queue.lua");
registry_script!(
    UNREGISTER_QUEUE,
    "#!lua flags=allow-oom",
    "unregister_queue.lua"
);
registry_script!(TENANT_PUT, "#!lua flags=allow-oom", "tenant_put.lua");
registry_script!(
    TENANT_DELETE_BEGIN,
    "#!lua flags=allow-oom",
    "tenant_delete_begin.lua"
);
registry_script!(TENANT_DELETE, "#!lua flags=allow-oom", "tenant_delete.lua");
registry_script!(RATE_LIMIT, "#!lua flags=allow-oom", "rate_limit.lua");
registry_script!(RECORD_PUT, "#!lua", "record_put.lua");
registry_script!(RECORD_DELETE, "#!lua flags=allow-oom", "record_delete.lua");
