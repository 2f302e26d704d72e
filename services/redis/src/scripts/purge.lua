-- purge: removes every message (visible, in flight, delayed). The queue, its uid and its
-- counters stay, so seqs and delivery numbers never repeat.
-- KEYS: the queue's six keys (see the prelude).
-- ARGV: none
-- Reply: {1}, or {0} if the queue does not exist
if redis.call('EXISTS', META) == 0 then
  return { 0 }
end
redis.call('UNLINK', VIS, RCV, SENT, MSG, RX)
return { 1 }
