-- transfer_register: files a queue in the due index of moves, to be looked at by recovery
-- from ARGV[2] on, under a fresh token (the drop in transfer_unregister.lua only removes the
-- registration it looked at, so a newer one is never lost).
-- KEYS[1] {P}:transfers      zset: queue id -> when recovery should look
-- KEYS[2] {P}:transfer-regs  hash: queue id -> token of its latest registration
-- ARGV[1] queue id '<tenant>/<queue>'
-- ARGV[2] when recovery should look (ms)
-- ARGV[3] token (random)
-- Reply: 1
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return 1
