-- tenant_delete (the last step of deleting a tenant, after tenant_delete_begin and the walk
-- that fenced and deleted each of its queues): drops the registry entries of generation <= G
-- and ends the deletion, so the tenant's queues may be created again.
-- KEYS[1] {P}:queues
-- KEYS[2] {P}:queue-uids
-- KEYS[3] {P}:tenant:<tenant>:queues
-- KEYS[4] {P}:queue-gens
-- KEYS[5] {P}:tenant-deleting
-- ARGV[1] tenant id
-- ARGV[2] the fence generation G
-- Reply: how many entries were dropped
local fence = tonumber(ARGV[2])
local dropped = 0
for _, name in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  local queue_id = ARGV[1] .. '/' .. name
  if tonumber(redis.call('HGET', KEYS[4], queue_id) or '0') <= fence then
    redis.call('ZREM', KEYS[1], queue_id)
    redis.call('HDEL', KEYS[2], queue_id)
    redis.call('HDEL', KEYS[4], queue_id)
    redis.call('ZREM', KEYS[3], name)
    dropped = dropped + 1
  end
end
-- Only the mark of this deletion: one begun since (after this one's walk let puts through
-- again) keeps its own.
if tonumber(redis.call('HGET', KEYS[5], ARGV[1]) or '-1') == fence + 1 then
  redis.call('HDEL', KEYS[5], ARGV[1])
end
return dropped
