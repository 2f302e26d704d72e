//! Listing a queue's stored seqs in order (`message_seqs.lua`), for redrive tasks.

use super::calls::not_found;
use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, QueueKey, SeqScan};

/// How many seqs one call looks at, at most: a queue whose seqs are mostly gone (deleted
/// messages) is walked over several calls, each a bounded script.
const SEQ_SCAN: usize = 10_000;

impl RedisEngine {
    pub(crate) async fn message_seqs(
        &self,
        key: &QueueKey,
        after: u64,
        limit: usize,
    ) -> Result<SeqScan, EngineError> {
        // Lua numbers are doubles: seqs stay far below 2^53, and an `after` beyond every seq
        // answers the same as 2^53 does.
        let after = after.min(1 << 53);
        let mut call = self.queue_call(&scripts::MESSAGE_SEQS, key);
        call.arg(after).arg(limit).arg(SEQ_SCAN.max(limit));
        let mut reply = not_found(self.run_queue(key, &call, false).await?)?;
        let last_seq = reply.u64()?;
        let scanned_to = reply.u64()?;
        let mut seqs = Vec::new();
        while !reply.is_empty() {
            seqs.push(reply.u64()?);
        }
        Ok(SeqScan {
            seqs,
            scanned_to,
            last_seq,
        })
    }
}
