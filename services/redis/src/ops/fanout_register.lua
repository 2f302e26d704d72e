-- fanout_register: files a topic in the due index of fan-outs, to be looked at by recovery
-- from ARGV[2] on, under a fresh token (transfer_unregister.lua, run on these keys, drops only
-- the registration recovery looked at), and remembers the topic among its tenant's (what a
-- tenant deletion forgets).
-- KEYS[1] {P}:fanouts                  zset: topic id -> when recovery should look
-- KEYS[2] {P}:fanout-regs              hash: topic id -> token of its latest registration
-- KEYS[3] {P}:tenant:<tenant>:topics   zset: topic names, score 0
-- ARGV[1] topic id '<tenant>/<topic>'
-- ARGV[2] when recovery should look (ms)
-- ARGV[3] token (random)
-- ARGV[4] topic name
-- Reply: 1
if not tonumber(ARGV[2]) or ARGV[3] == '' or ARGV[4] == '' then
  return redis.error_reply('ERR fanout_register: malformed arguments')
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[3], 0, ARGV[4])
return 1
