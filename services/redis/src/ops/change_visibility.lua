-- change_visibility: makes messages receivable `timeout` after now (0: at once, which also
-- publishes a wake-up), each answered on its own. A gone or expired message is stale. FIFO
-- queues: the groups of changed messages are placed again (a group is ready once none of its
-- received messages is hidden).
-- KEYS: the queue's keys (see the prelude).
-- ARGV[1] now
-- ARGV[2] wake channel
-- ARGV[3] wake payload
-- ARGV[4], ARGV[5], ARGV[6], ARGV[7], ...: per entry, the queue uid the handle names
--         (decimal), the message member (16-digit seq), the delivery ('<counter>-<salt>') and
--         the new timeout in ms
-- Reply: {0} if the queue does not exist, else {1, code, ...} in order, code 0 = changed,
--         1 = invalid (another queue or incarnation), 2 = stale (delivered again, or gone)
if redis.call('EXISTS', META) == 0 then
  return { 0 }
end
local now = tonumber(ARGV[1])
local cutoff = now - retention()
local uid = redis.call('HGET', META, 'uid')
local reply = { 1 }
local woke = false
for i = 4, #ARGV, 4 do
  local code = 0
  if ARGV[i] ~= uid then
    code = 1
  else
    local m = ARGV[i + 1]
    local sent_at = tonumber(redis.call('ZSCORE', SENT, m))
    local count, _, delivery = rx_of(m)
    if not sent_at or sent_at <= cutoff or not count or delivery ~= ARGV[i + 2] then
      code = 2
    else
      local timeout = tonumber(ARGV[i + 3])
      local at = int(now + timeout)
      redis.call('ZADD', VIS, at, m)
      redis.call('ZADD', RCV, at, m)
      if FIFO then
        local g = redis.call('HGET', MGRP, m)
        if g then
          dirty[g] = true
        end
      end
      if timeout == 0 then
        woke = true
      end
    end
  end
  reply[#reply + 1] = code
end
if FIFO then
  settle_dirty(now)
end
if woke then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return reply
