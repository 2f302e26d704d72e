-- tenant_delete: drops a tenant's record and all its registry entries (its queues were
-- deleted one by one before this runs).
-- KEYS[1] {P}:tenants
-- KEYS[2] {P}:tenant-ids
-- KEYS[3] {P}:queues
-- KEYS[4] {P}:queue-uids
-- KEYS[5] {P}:tenant:<tenant>:queues
-- ARGV[1] tenant id
-- Reply: 1 if the tenant record existed, else 0
local existed = redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
for _, name in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
  redis.call('ZREM', KEYS[3], ARGV[1] .. '/' .. name)
  redis.call('HDEL', KEYS[4], ARGV[1] .. '/' .. name)
end
redis.call('DEL', KEYS[5])
return existed
