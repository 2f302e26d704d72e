-- record_put: writes one of the services' records if its version is the expected one
-- (compare-and-set), bumping the version.
-- KEYS[1] {P}:records:<kind>      hash key -> '<version> <value>'
-- KEYS[2] {P}:record-keys:<kind>  zset of keys, score 0 (ordered listing)
-- ARGV[1] key
-- ARGV[2] value
-- ARGV[3] expected version ('' = the record must not exist)
-- Reply: the new version, or 0 if the stored version was another (nothing written)
local stored = redis.call('HGET', KEYS[1], ARGV[1])
local version = 0
if stored then
  version = tonumber(string.match(stored, '^(%d+) '))
end
local expected = tonumber(ARGV[3] ~= '' and ARGV[3] or '0')
if version ~= expected then
  return 0
end
version = version + 1
redis.call('HSET', KEYS[1], ARGV[1], version .. ' ' .. ARGV[2])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return version
