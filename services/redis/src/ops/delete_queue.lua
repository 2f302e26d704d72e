-- delete_queue: removes the queue and every message; wakes its listeners (they look again
-- and find it gone). A later put_queue creates a new incarnation with a new uid, so handles
-- of this one become invalid.
-- KEYS: the queue's keys (see the prelude), then its fence key.
-- ARGV[1] wake channel
-- ARGV[2] wake payload
-- ARGV[3] tenant deletion only: the fence generation G. Registrations of generation <= G are
--         void for this name from now on (put_queue refuses them), whether the queue exists
--         yet or not; '' for a plain queue deletion
-- ARGV[4] how long the queue's applied ids outlive it, in ms (see unlink_queue_keys)
-- ARGV[5] the queue's id '<tenant>/<queue>' (named in the 'M' entries of its move intents)
-- Reply: {1, uid of the deleted incarnation} if it existed, {0} if not
if ARGV[3] ~= '' then
  local fence = tonumber(redis.call('GET', FENCE) or '-1')
  if tonumber(ARGV[3]) > fence then
    -- Kept for good (a few bytes per name a tenant deletion walked): a put_queue that
    -- registered before the deletion may reach this slot arbitrarily late.
    redis.call('SET', FENCE, ARGV[3])
  end
end
if redis.call('EXISTS', META) == 0 then
  return { 0 }
end
local uid = redis.call('HGET', META, 'uid')
-- Its payload messages leave for good (one look per payload message, none for the others);
-- the log is not a queue key and stays. Messages in a move's intent (`out`) are not
-- released here: the apply may have put them in their destination already. Each gets an 'M'
-- entry instead, settled in the destination's slot (release_intents): without it the
-- payload of a move whose apply never ran would be named by nothing and leak. Tenant
-- deletion deletes every queue through this script, so it is covered too.
release_all()
release_intents(ARGV[5])
unlink_queue_keys(ARGV[4])
redis.call('PUBLISH', ARGV[1], ARGV[2])
return { 1, uid }
