-- tenant_put: writes a tenant record, checking first whether it exists and, for a tenant a
-- token names, whether the token was issued after the tenant's last deletion.
-- KEYS[1] {P}:tenants         hash id -> record (JSON)
-- KEYS[2] {P}:tenant-ids      zset of ids, score 0
-- KEYS[3] {P}:tenant-deleted  hash id -> when last deleted (tombstone, kept for good)
-- ARGV[1] mode: 'create' (only if absent), 'ensure' (only if absent, not an error),
--         'update' (only if present)
-- ARGV[2] tenant id
-- ARGV[3] record (JSON)
-- ARGV[4] ensure only: when the token was issued (ms), '' when it says not
-- Reply: {status, tombstone (-1: never deleted), record}; status 1 written; 0 not written
--        because it exists (create, ensure: record is the stored one, whose quotas the caller
--        caches); -1 not written because it does not exist (update); -2 not
--        written because the token was issued at or before the tombstone (ensure)
local exists = redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1
local tombstone = tonumber(redis.call('HGET', KEYS[3], ARGV[2]) or '-1')
if ARGV[1] == 'ensure' and tombstone >= 0 then
  if ARGV[4] == '' or tonumber(ARGV[4]) <= tombstone then
    return { -2, tombstone }
  end
end
if ARGV[1] == 'update' then
  if not exists then
    return { -1, tombstone }
  end
elseif exists then
  return { 0, tombstone, redis.call('HGET', KEYS[1], ARGV[2]) }
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('ZADD', KEYS[2], 0, ARGV[2])
return { 1, tombstone, ARGV[3] }
