-- register_queue: records a queue in the registries, before the queue itself is created (a
-- crash in between leaves at worst an entry naming a missing queue, which readers skip and the
-- expiry sweep drops once it is old). Registering again refreshes the entry.
--
-- This is where a creation is admitted, atomically: a new name past the tenant's `max_queues`
-- is refused here, and so is any registration while the tenant is being deleted, or after its
-- deletion until it exists again. The entry is stamped with the tenant's generation, which the
-- creation script in the queue's slot checks against the queue's fence (see
-- tenant_delete_begin.lua for why no interleaving leaves a live queue outside the registries).
-- KEYS[1] {P}:queues                     zset '<tenant>/<queue>' -> when last registered
-- KEYS[2] {P}:queue-uids                 hash '<tenant>/<queue>' -> uid of the incarnation
--                                        the entry was last registered for
-- KEYS[3] {P}:tenant:<tenant>:queues     zset of the tenant's queue names, score 0
-- KEYS[4] {P}:queue-gens                 hash '<tenant>/<queue>' -> tenant generation of the
--                                        last registration
-- KEYS[5] {P}:tenants                    hash id -> record (JSON)
-- KEYS[6] {P}:tenant-deleted             hash id -> when last deleted (tombstone)
-- KEYS[7] {P}:tenant-gen                 hash id -> generation (one more per deletion)
-- KEYS[8] {P}:tenant-deleting            hash id -> generation of the deletion under way
-- KEYS[9] {P}:expiry-due                 zset '<tenant>/<queue>' -> when the expiry sweep should
--                                        look at it next (now: the retention may have changed)
-- ARGV[1] '<tenant>/<queue>'
-- ARGV[2] the queue name
-- ARGV[3] now
-- ARGV[4] the queue's uid (the one put_queue is about to create, or the one that exists)
-- ARGV[5] tenant id
-- Reply: {0, generation} registered; {1, max_queues} refused by the quota; {2, deleted_at}
--        refused because the tenant is being deleted or was deleted
local tenant = ARGV[5]
local tombstone = redis.call('HGET', KEYS[6], tenant)
if redis.call('HEXISTS', KEYS[8], tenant) == 1 then
  return { 2, tonumber(tombstone or ARGV[3]) }
end
local record = redis.call('HGET', KEYS[5], tenant)
if tombstone and not record then
  return { 2, tonumber(tombstone) }
end
if record and not redis.call('ZSCORE', KEYS[3], ARGV[2]) then
  local quotas = cjson.decode(record).quotas
  local max = quotas and quotas.max_queues
  if type(max) == 'number' and redis.call('ZCARD', KEYS[3]) >= max then
    return { 1, max }
  end
end
local generation = redis.call('HGET', KEYS[7], tenant) or '0'
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[9], ARGV[3], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
redis.call('ZADD', KEYS[3], 0, ARGV[2])
redis.call('HSET', KEYS[4], ARGV[1], generation)
return { 0, tonumber(generation) }
