//! The due index of moves (`transfer_register.lua`, `transfer_due.lua`,
//! `transfer_unregister.lua`): which queues recovery should look at, and from when. It lives
//! in the registries' slot, apart from every queue, so it is written before an intent (a
//! spurious entry costs recovery one look) and dropped only if unchanged since it was read.

use crate::codec::Reply;
use crate::conn::Call;
use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, Millis};

impl RedisEngine {
    fn due_call(&self, script: &'static redis::Script) -> Call {
        Call::new(
            script,
            [self.keys.transfers_due(), self.keys.transfer_regs()],
        )
    }

    /// Files `queue_id` to be looked at by recovery from `at` on.
    pub(crate) async fn register_transfers(
        &self,
        queue_id: &str,
        at: Millis,
    ) -> Result<(), EngineError> {
        let mut call = self.due_call(&scripts::TRANSFER_REGISTER);
        call.arg(queue_id)
            .arg(at)
            .arg(hex::encode(rand::random::<[u8; 8]>()));
        self.redis.eval(&call, true).await?;
        Ok(())
    }

    /// Up to `limit` queues due by `now`, each with the token of its registration.
    pub(crate) async fn due_transfers(
        &self,
        now: Millis,
        limit: usize,
    ) -> Result<Vec<(String, String)>, EngineError> {
        let mut call = self.due_call(&scripts::TRANSFER_DUE);
        call.arg(now).arg(limit);
        let mut reply = Reply::new(self.redis.eval(&call, false).await?)?;
        let mut due = Vec::new();
        while !reply.is_empty() {
            due.push((reply.text()?, reply.text()?));
        }
        Ok(due)
    }

    /// Drops `queue_id` from the index unless it was registered again since `token` was read.
    pub(crate) async fn unregister_transfers(
        &self,
        queue_id: &str,
        token: &str,
    ) -> Result<(), EngineError> {
        let mut call = self.due_call(&scripts::TRANSFER_UNREGISTER);
        call.arg(queue_id).arg(token);
        self.redis.eval(&call, false).await?;
        Ok(())
    }
}
