-- register_queue: records a queue in the registries, before the queue itself is created (a
-- crash in between leaves at worst an entry naming a missing queue, which readers skip and the
-- expiry sweep drops once it is old). Registering again refreshes the entry.
-- KEYS[1] {P}:queues                     zset '<tenant>/<queue>' -> when last registered
-- KEYS[2] {P}:queue-uids                 hash '<tenant>/<queue>' -> uid of the incarnation
--                                        the entry was last registered for
-- KEYS[3] {P}:tenant:<tenant>:queues     zset of the tenant's queue names, score 0
-- ARGV[1] '<tenant>/<queue>'
-- ARGV[2] the queue name
-- ARGV[3] now
-- ARGV[4] the queue's uid (the one put_queue is about to create, or the one that exists)
-- Reply: 1
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
redis.call('ZADD', KEYS[3], 0, ARGV[2])
return 1
