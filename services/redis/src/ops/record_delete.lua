-- record_delete: removes one of the services' records if its version is the expected one.
-- KEYS[1] {P}:records:<kind>      hash key -> '<version> <value>'
-- KEYS[2] {P}:record-keys:<kind>  zset of keys, score 0
-- ARGV[1] key
-- ARGV[2] expected version
-- Reply: 1 removed, 0 not (absent, or another version)
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if not stored or string.match(stored, '^(%d+) ') ~= ARGV[2] then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
