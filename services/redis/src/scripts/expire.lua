-- expire: removes up to `limit` messages whose retention has ended by now. Atomic, so
-- gateways sweeping the same queue at once never remove (or count) a message twice.
-- KEYS: the queue's six keys (see the prelude).
-- ARGV[1] now
-- ARGV[2] limit
-- Reply: {0} if the queue does not exist, else {1, removed, more (0|1),
--         next_due (the earliest sent_at + retention still stored, -1: none), retention (ms)}
if redis.call('EXISTS', META) == 0 then
  return { 0 }
end
local now = tonumber(ARGV[1])
local keep = retention()
local removed, more = expire_upto(now - keep, tonumber(ARGV[2]))
local first = redis.call('ZRANGE', SENT, 0, 0, 'WITHSCORES')
local due = -1
if #first == 2 then
  due = tonumber(first[2]) + keep
end
return { 1, removed, more, due, keep }
