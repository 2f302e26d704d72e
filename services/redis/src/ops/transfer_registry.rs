//! The due indexes of recovery: of moves (`transfer_register.lua`) and of fan-outs (registered
//! in `fanout_registry.rs`), both read by `transfer_due.lua` and trimmed by
//! `transfer_unregister.lua`: which queues or topics recovery should look at, and from when. It lives
//! in the registries' slot, apart from every queue, so it is written before an intent (a
//! spurious entry costs recovery one look) and dropped only if unchanged since it was read.

use crate::codec::Reply;
use crate::conn::Call;
use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, Millis};

/// The two recovery indexes in the registries' slot, read and trimmed by the same scripts
/// (`transfer_due.lua`, `transfer_unregister.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum RecoveryIndex {
    /// Queues that may hold unfinished moves.
    Transfers,
    /// Topics that may hold unfinished fan-outs.
    Fanouts,
}

impl RedisEngine {
    /// A call of `script` over `index`'s two keys: the due set and its registration tokens.
    pub(crate) fn recovery_index_call(
        &self,
        index: RecoveryIndex,
        script: &'static redis::Script,
    ) -> Call {
        let keys = match index {
            RecoveryIndex::Transfers => [self.keys.transfers_due(), self.keys.transfer_regs()],
            RecoveryIndex::Fanouts => [self.keys.fanouts_due(), self.keys.fanout_regs()],
        };
        Call::new(script, keys)
    }

    /// Files `queue_id` to be looked at by recovery from `at` on.
    pub(crate) async fn register_transfers(
        &self,
        queue_id: &str,
        at: Millis,
    ) -> Result<(), EngineError> {
        let mut call =
            self.recovery_index_call(RecoveryIndex::Transfers, &scripts::TRANSFER_REGISTER);
        call.arg(queue_id)
            .arg(at)
            .arg(hex::encode(rand::random::<[u8; 8]>()));
        self.redis.eval(&call, true).await?;
        Ok(())
    }

    /// Up to `limit` entries of `index` due by `now`, each with the token of its registration.
    pub(crate) async fn due_for_recovery(
        &self,
        index: RecoveryIndex,
        now: Millis,
        limit: usize,
    ) -> Result<Vec<(String, String)>, EngineError> {
        let mut call = self.recovery_index_call(index, &scripts::TRANSFER_DUE);
        call.arg(now).arg(limit);
        let mut reply = Reply::new(self.redis.eval(&call, false).await?)?;
        let mut due = Vec::new();
        while !reply.is_empty() {
            due.push((reply.text()?, reply.text()?));
        }
        Ok(due)
    }

    /// Drops `id` from `index` unless it was registered again since `token` was read.
    pub(crate) async fn unregister_recovery(
        &self,
        index: RecoveryIndex,
        id: &str,
        token: &str,
    ) -> Result<(), EngineError> {
        let mut call = self.recovery_index_call(index, &scripts::TRANSFER_UNREGISTER);
        call.arg(id).arg(token);
        self.redis.eval(&call, false).await?;
        Ok(())
    }
}
