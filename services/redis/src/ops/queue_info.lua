-- queue_info: a queue's identity, configuration and counts at `now`. Changes nothing.
-- KEYS: the queue's keys (see the prelude).
-- ARGV[1] now
-- Reply: {0} if the queue does not exist, else {1, uid, created_at, updated_at, config,
--         visible, in_flight, delayed, oldest_sent_at (-1: none)}
if redis.call('EXISTS', META) == 0 then
  return { 0 }
end
return describe(tonumber(ARGV[1]))
