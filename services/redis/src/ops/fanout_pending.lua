-- fanout_pending: the oldest pending outbox entries of a topic, in order, for recovery.
-- KEYS: the topic's keys (see publish.lua): meta, counters, dedup, dedup-at, outbox,
--       outbox-order
-- ARGV[1] most entries to answer
-- Reply: {more (1 if the outbox holds more than answered, else 0), then per entry: entry id,
--         value ('' if it went meanwhile)}
local OUTBOX, ORDER = KEYS[5], KEYS[6]
local limit = tonumber(ARGV[1])
if not limit or limit < 1 then
  return redis.error_reply('ERR fanout_pending: bad limit')
end
local ids = redis.call('ZRANGE', ORDER, 0, limit - 1)
local reply = { 0 }
if redis.call('ZCARD', ORDER) > #ids then
  reply[1] = 1
end
for _, id in ipairs(ids) do
  reply[#reply + 1] = id
  reply[#reply + 1] = redis.call('HGET', OUTBOX, id) or ''
end
return reply
