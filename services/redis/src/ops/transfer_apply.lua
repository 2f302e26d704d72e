-- transfer_apply: the apply step of moves into this queue (see transfers.rs). Inserts each
-- moved message as a new one (a new seq at the end of the queue, visible now, never
-- received) unless its transfer id was applied here before, which makes the step idempotent
-- (recovery may repeat it). Moves meet neither deduplication nor max_depth. Applied ids are
-- remembered for a window (ARGV[4]) far longer than any recovery takes to come.
-- KEYS: the queue's keys (see the prelude).
-- ARGV[1] now
-- ARGV[2] wake channel
-- ARGV[3] wake payload
-- ARGV[4] how long applied transfer ids are remembered, in ms
-- ARGV[5], ...: per message: transfer id, message (JSON), sent_at, group ('' = none; FIFO),
--         size, payload tag ('' = none; see the prelude)
-- Reply: {0, per message: 1 if its transfer was applied before the queue was deleted (its
--         `applied` ids outlive it), else 0} if the queue does not exist, else {1, per
--         message: its new seq, or 0 if this transfer was applied before}
if redis.call('EXISTS', META) == 0 then
  local gone = { 0 }
  for i = 5, #ARGV, 6 do
    if redis.call('ZSCORE', APPLIED, ARGV[i]) then
      gone[#gone + 1] = 1
    else
      gone[#gone + 1] = 0
    end
  end
  return gone
end
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', APPLIED, '-inf', int(now - tonumber(ARGV[4])))
local reply = { 1 }
local added = 0
for i = 5, #ARGV, 6 do
  local id = ARGV[i]
  if redis.call('ZSCORE', APPLIED, id) then
    reply[#reply + 1] = 0
  else
    local seq = redis.call('HINCRBY', META, 'seq', 1)
    local m = member(seq)
    redis.call('HSET', MSG, m, ARGV[i + 1])
    add_size(m, ARGV[i + 4], ARGV[i + 5])
    redis.call('ZADD', VIS, ARGV[1], m)
    redis.call('ZADD', SENT, ARGV[i + 2], m)
    if FIFO then
      local g = ARGV[i + 3]
      redis.call('ZADD', GMSG, 0, group_prefix(g) .. m)
      redis.call('HSET', MGRP, m, g)
      if redis.call('HEXISTS', GROUP, g) == 0 then
        place(g, now, m, now)
      end
    end
    redis.call('ZADD', APPLIED, ARGV[1], id)
    added = added + 1
    reply[#reply + 1] = seq
  end
end
if added > 0 then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return reply
