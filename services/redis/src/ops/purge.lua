-- purge: removes every message (visible, in flight, delayed). The queue, its uid and its
-- counters stay, so seqs and delivery numbers never repeat. FIFO queues keep their
-- deduplication records too (as SQS does: a purge does not reopen the window), and forget
-- their groups and request attempt ids.
-- KEYS: the queue's keys (see the prelude).
-- ARGV: none
-- Reply: {1}, or {0} if the queue does not exist
if redis.call('EXISTS', META) == 0 then
  return { 0 }
end
-- Every payload message leaves for good: released (pay holds those only).
release_all()
redis.call('UNLINK', VIS, RCV, SENT, MSG, RX, SIZES, PAY)
redis.call('HSET', META, 'stored_bytes', 0)
if FIFO then
  redis.call('UNLINK', READY, WAIT, GROUP, GMSG, MGRP, ATTEMPT, ATTEMPT_AT)
end
return { 1 }
