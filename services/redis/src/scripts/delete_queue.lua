-- delete_queue: removes the queue and every message; wakes its listeners (they look again
-- and find it gone). A later put_queue creates a new incarnation with a new uid, so handles
-- of this one become invalid.
-- KEYS: the queue's keys (see the prelude).
-- ARGV[1] wake channel
-- ARGV[2] wake payload
-- Reply: {1, uid of the deleted incarnation} if it existed, {0} if not
if redis.call('EXISTS', META) == 0 then
  return { 0 }
end
local uid = redis.call('HGET', META, 'uid')
redis.call('UNLINK', unpack(KEYS))
redis.call('PUBLISH', ARGV[1], ARGV[2])
return { 1, uid }
