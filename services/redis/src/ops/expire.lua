-- expire: removes up to `limit` messages whose retention has ended by now. Atomic, so
-- gateways sweeping the same queue at once never remove (or count) a message twice. FIFO
-- queues: the groups of removed messages are placed again, and up to `limit` deduplication
-- records and request attempt ids past their windows are forgotten. Every queue forgets the
-- transfer ids applied into it longer ago than their window.
-- KEYS: the queue's keys (see the prelude).
-- ARGV[1] now
-- ARGV[2] limit
-- ARGV[3] deduplication window in ms
-- ARGV[4] request attempt id window in ms
-- ARGV[5] how long applied transfer ids are remembered, in ms (see transfer_apply.lua)
-- Reply: {0} if the queue does not exist, else {1, removed, more (0|1),
--         next_due (the earliest sent_at + retention still stored, -1: none), retention (ms)}
if redis.call('EXISTS', META) == 0 then
  return { 0 }
end
local now = tonumber(ARGV[1])
local keep = retention()
local removed, more = expire_upto(now - keep, tonumber(ARGV[2]))
redis.call('ZREMRANGEBYSCORE', APPLIED, '-inf', int(now - tonumber(ARGV[5])))
if FIFO then
  settle_dirty(now)
  forget_before(DEDUP, DEDUP_AT, now - tonumber(ARGV[3]), tonumber(ARGV[2]))
  forget_before(ATTEMPT, ATTEMPT_AT, now - tonumber(ARGV[4]), tonumber(ARGV[2]))
end
local first = redis.call('ZRANGE', SENT, 0, 0, 'WITHSCORES')
local due = -1
if #first == 2 then
  due = tonumber(first[2]) + keep
end
return { 1, removed, more, due, keep }
