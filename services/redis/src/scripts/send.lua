-- send: stores a batch of messages, each accepted or refused on its own (a queue holding
-- max_depth messages refuses the excess), then publishes one wake-up.
-- KEYS: the queue's six keys (see the prelude).
-- ARGV[1] now (becomes each message's sent_at)
-- ARGV[2] wake channel
-- ARGV[3] wake payload
-- ARGV[4], ARGV[5], ...: per message, visible_at then the message (JSON)
-- Reply: {0} if the queue does not exist, else {1, seq or 0 (refused), ...} in order
if redis.call('EXISTS', META) == 0 then
  return { 0 }
end
local now = ARGV[1]
local max_depth = tonumber(redis.call('HGET', META, 'max_depth'))
local depth = redis.call('ZCARD', SENT)
local reply = { 1 }
local accepted = 0
for i = 4, #ARGV, 2 do
  if max_depth and depth >= max_depth then
    reply[#reply + 1] = 0
  else
    local seq = redis.call('HINCRBY', META, 'seq', 1)
    local m = member(seq)
    redis.call('HSET', MSG, m, ARGV[i + 1])
    redis.call('ZADD', VIS, ARGV[i], m)
    redis.call('ZADD', SENT, now, m)
    depth = depth + 1
    accepted = accepted + 1
    reply[#reply + 1] = seq
  end
end
if accepted > 0 then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return reply
