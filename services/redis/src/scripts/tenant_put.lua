-- tenant_put: writes a tenant record, checking first whether it exists.
-- KEYS[1] {P}:tenants     hash id -> record (JSON)
-- KEYS[2] {P}:tenant-ids  zset of ids, score 0
-- ARGV[1] mode: 'create' (only if absent), 'ensure' (only if absent, not an error),
--         'update' (only if present)
-- ARGV[2] tenant id
-- ARGV[3] record (JSON)
-- Reply: 1 written; 0 not written because it exists (create, ensure); -1 not written
--        because it does not exist (update)
local exists = redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1
if ARGV[1] == 'update' then
  if not exists then
    return -1
  end
elseif exists then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('ZADD', KEYS[2], 0, ARGV[2])
return 1
