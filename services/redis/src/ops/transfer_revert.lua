-- transfer_revert: undoes the intent step of moves that could not be applied (their
-- destination is missing): puts each message back exactly as transfer_out found it (same
-- seq, scores, receive record and group position) and forgets the intent. An intent that is
-- gone (reverted or acknowledged already) is skipped, so a repeat changes nothing.
-- KEYS: the queue's keys (see the prelude).
-- ARGV[1] now
-- ARGV[2] wake channel
-- ARGV[3] wake payload
-- ARGV[4], ...: transfer ids
-- Reply: {0} if the queue does not exist (its intents went with it), else {1, per id: 1 if
--         restored, 0 if there was no such intent}
if redis.call('EXISTS', META) == 0 then
  return { 0 }
end
local now = tonumber(ARGV[1])
local reply = { 1 }
local woke = false
for i = 4, #ARGV do
  local json = redis.call('HGET', OUT, ARGV[i])
  if json then
    local t = cjson.decode(json)
    local m = t.seq
    redis.call('HSET', MSG, m, t.msg)
    add_size(m, t.size, t.pay)
    redis.call('ZADD', VIS, t.vis, m)
    redis.call('ZADD', SENT, t.sent, m)
    if t.rcv then
      redis.call('ZADD', RCV, t.rcv, m)
    end
    if t.rx then
      redis.call('HSET', RX, m, t.rx)
    end
    if FIFO and t.grp then
      redis.call('ZADD', GMSG, 0, group_prefix(t.grp) .. m)
      redis.call('HSET', MGRP, m, t.grp)
      dirty[t.grp] = true
    end
    redis.call('HDEL', OUT, ARGV[i])
    if tonumber(t.vis) <= now then
      woke = true
    end
    reply[#reply + 1] = 1
  else
    reply[#reply + 1] = 0
  end
end
if FIFO then
  settle_dirty(now)
end
if woke then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return reply
