-- delete: deletes messages by receipt handle, each answered on its own. A message that is
-- gone (deleted, purged, expired) answers success: retries must be safe. FIFO queues: the
-- groups of deleted messages are placed again, and a group that can deliver now (its message
-- in flight is gone) publishes a wake-up.
-- KEYS: the queue's keys (see the prelude).
-- ARGV[1] now
-- ARGV[2] wake channel
-- ARGV[3] wake payload
-- ARGV[4], ARGV[5], ARGV[6], ...: per handle, the queue uid it names (decimal), the message
--         member (16-digit seq) and the delivery ('<counter>-<salt>', decimal)
-- Reply: {0} if the queue does not exist, else {1, woke (0|1), code, ...} in order, code 0 =
--         deleted or already gone, 1 = invalid (another queue or incarnation), 2 = stale
--         (delivered again since, or never delivered)
if redis.call('EXISTS', META) == 0 then
  return { 0 }
end
local now = tonumber(ARGV[1])
local cutoff = now - retention()
local uid = redis.call('HGET', META, 'uid')
local reply = { 1, 0 }
for i = 4, #ARGV, 3 do
  local code = 0
  if ARGV[i] ~= uid then
    code = 1
  else
    local m = ARGV[i + 1]
    local sent_at = redis.call('ZSCORE', SENT, m)
    if sent_at and tonumber(sent_at) <= cutoff then
      -- Expired counts as gone whatever the handle; remove it now all the same.
      remove_message(m)
    elseif sent_at then
      local count, _, delivery = rx_of(m)
      if not count or delivery ~= ARGV[i + 2] then
        code = 2
      else
        remove_message(m)
      end
    end
  end
  reply[#reply + 1] = code
end
if FIFO and settle_dirty(now) then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  reply[2] = 1
end
return reply
