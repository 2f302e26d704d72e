-- unregister_queue: drops a queue from the registries after the queue itself is gone, unless
-- the entry has been registered again since (for a new incarnation a put_queue is creating
-- right now, which must stay listed).
-- KEYS[1] {P}:queues
-- KEYS[2] {P}:queue-uids
-- KEYS[3] {P}:tenant:<tenant>:queues
-- KEYS[4] {P}:queue-gens
-- ARGV[1] '<tenant>/<queue>'
-- ARGV[2] the queue name
-- ARGV[3] 'uid': drop it only if it was last registered for the uid in ARGV[4] (the
--         incarnation just deleted); 'before': drop it only if it was last registered no
--         later than the instant in ARGV[4] (the expiry sweep, for a queue found missing)
-- ARGV[4] the uid or the instant
-- Reply: 1 dropped, 0 kept
if ARGV[3] == 'uid' then
  if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[4] then
    return 0
  end
else
  local registered = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if registered and tonumber(registered) > tonumber(ARGV[4]) then
    return 0
  end
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[2])
redis.call('HDEL', KEYS[4], ARGV[1])
return 1
