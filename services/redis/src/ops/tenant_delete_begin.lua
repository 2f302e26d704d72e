-- tenant_delete_begin: the first step of deleting a tenant. Drops its record, records its
-- tombstone (tokens issued until now stop naming it), marks the deletion under way (from now
-- on register_queue refuses the tenant) and answers the names to delete.
--
-- Why no interleaving leaves a queue that answers but is in no registry (Redis Cluster: the
-- registries share one slot, each queue has its own, and no script spans two):
-- * a put_queue registers (register_queue, registry slot) before it creates (put_queue, the
--   queue's slot), and its registration carries the tenant generation it saw;
-- * this script bumps the generation to G+1 and raises the deletion mark, so every
--   registration admitted before it carries at most G, and none is admitted until
--   tenant_delete_end;
-- * the walk then fences every name registered here (delete_queue with a fence, queue slot):
--   the fence says "registrations of generation <= G are void", and deletes the queue. A
--   put_queue that registered before this script either created its queue before the fence
--   (so the walk deletes it) or meets the fence and creates nothing;
-- * tenant_delete_end drops only entries of generation <= G, so an entry registered after the
--   deletion (by a later put_queue, whose queue no fence of this deletion stops) stays.
-- A crash between steps leaves the mark (puts stay refused until the deletion is retried) and
-- at worst entries naming missing queues, which readers skip.
-- KEYS[1] {P}:tenants
-- KEYS[2] {P}:tenant-ids
-- KEYS[3] {P}:tenant-deleted
-- KEYS[4] {P}:tenant-gen
-- KEYS[5] {P}:tenant-deleting
-- KEYS[6] {P}:tenant:<tenant>:queues
-- ARGV[1] tenant id
-- ARGV[2] now
-- Reply: {existed (0|1), fence generation G, the registered names...}; existed is 1 when the
--        record existed or an earlier deletion of it was left unfinished (queues of a tenant
--        without a record are deleted too, but the answer is about the tenant)
local id = ARGV[1]
local existed = redis.call('HDEL', KEYS[1], id)
redis.call('ZREM', KEYS[2], id)
local names = redis.call('ZRANGE', KEYS[6], 0, -1)
local deleted_at = tonumber(ARGV[2])
local previous = redis.call('HGET', KEYS[3], id)
if previous and tonumber(previous) > deleted_at then
  deleted_at = tonumber(previous)
end
local generation = redis.call('HGET', KEYS[5], id)
if generation then
  -- Another deletion is under way (or was left unfinished): join it, same fence.
  existed = 1
else
  if existed == 0 and #names == 0 then
    return { 0, 0 }
  end
  generation = redis.call('HINCRBY', KEYS[4], id, 1)
  redis.call('HSET', KEYS[5], id, generation)
end
redis.call('HSET', KEYS[3], id, string.format('%d', deleted_at))
local reply = { existed, tonumber(generation) - 1 }
for _, name in ipairs(names) do
  reply[#reply + 1] = name
end
return reply
