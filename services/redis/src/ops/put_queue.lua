-- put_queue: creates the queue, or replaces its configuration keeping its uid, created_at,
-- counters and messages. Refuses a caller whose registration a tenant deletion voided since
-- (see tenant_delete_begin.lua): then nothing changes.
-- KEYS: the queue's keys (see the prelude), then its fence key.
-- ARGV[1] now
-- ARGV[2] uid for a new incarnation (decimal u64 chosen at random by the engine)
-- ARGV[3] configuration (JSON)
-- ARGV[4] retention in ms
-- ARGV[5] max_depth ('' = unbounded)
-- ARGV[6] deduplication scope: 'queue' | 'message_group' (read by send on FIFO queues)
-- ARGV[7] the tenant generation register_queue answered
-- ARGV[8] the redrive policy's max_receive_count ('' = no policy; read by receive)
-- ARGV[9] retry backoff '<base ms> <max ms> <jitter 0|1>' ('' = none; read by receive)
-- ARGV[10] the queue's id '<tenant>/<queue>' (for release_intents)
-- Reply: {-1} refused by the fence; else {created (0|1), uid, created_at, updated_at, config,
--         visible, in_flight, delayed, oldest_sent_at (-1: none)}
local now = tonumber(ARGV[1])
local fence = redis.call('GET', FENCE)
if fence and tonumber(ARGV[7]) <= tonumber(fence) then
  return { -1 }
end
local created = 0
if redis.call('EXISTS', META) == 0 then
  created = 1
  -- A new incarnation starts empty, whatever an interrupted past left behind (a payload
  -- message among that leaves for good).
  release_all()
  release_intents(ARGV[10])
  unlink_queue_keys(nil)
  redis.call('HSET', META, 'uid', ARGV[2], 'created_at', ARGV[1], 'seq', 0, 'delivery', 0)
end
redis.call('HSET', META, 'config', ARGV[3], 'retention', ARGV[4], 'max_depth', ARGV[5],
  'dedup_scope', ARGV[6], 'updated_at', ARGV[1], 'max_receives', ARGV[8], 'backoff', ARGV[9])
local reply = describe(now)
reply[1] = created
return reply
