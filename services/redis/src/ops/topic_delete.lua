-- topic_delete: forgets a topic's state in its slot: sequence numbers, deduplication records
-- and counters. The outbox stays unless ARGV[1] is 'all' (a tenant deletion): publications
-- already answered are still delivered, and the entry counter `order` stays while the outbox
-- holds entries so that later entries still sort after them.
-- KEYS: the topic's keys (see publish.lua): meta, counters, dedup, dedup-at, outbox,
--       outbox-order
-- ARGV[1] 'state' (delete_topic) or 'all' (also the outbox)
-- Reply: 1 if there was anything to forget, else 0
local META, COUNTERS, DEDUP, DEDUP_AT, OUTBOX, ORDER = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
if ARGV[1] ~= 'state' and ARGV[1] ~= 'all' then
  return redis.error_reply('ERR topic_delete: unknown mode')
end
local existed = redis.call('EXISTS', META, COUNTERS, DEDUP) > 0
if ARGV[1] == 'all' then
  existed = existed or redis.call('EXISTS', OUTBOX) == 1
  redis.call('DEL', META, COUNTERS, DEDUP, DEDUP_AT, OUTBOX, ORDER)
else
  redis.call('DEL', COUNTERS, DEDUP, DEDUP_AT)
  if redis.call('ZCARD', ORDER) == 0 then
    redis.call('DEL', META)
  else
    redis.call('HDEL', META, 'seq')
  end
end
if existed then
  return 1
end
return 0
