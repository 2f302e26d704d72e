-- peek: up to `limit` unexpired messages in one state, oldest sent first. Changes nothing.
-- Walks messages by sent_at and stops after `scan` of them, so a state that is rare among
-- very many messages may show fewer than exist.
-- KEYS: the queue's keys (see the prelude).
-- ARGV[1] now
-- ARGV[2] state: 'visible' | 'in_flight' | 'delayed'
-- ARGV[3] limit
-- ARGV[4] scan: most messages to look at
-- Reply: {0} if the queue does not exist, else {1, then per message: seq, sent_at,
--         receive_count, first_received_at (-1: never), message (JSON)}
if redis.call('EXISTS', META) == 0 then
  return { 0 }
end
local now = tonumber(ARGV[1])
local wanted = ARGV[2]
local limit = tonumber(ARGV[3])
local scan = tonumber(ARGV[4])
local cutoff = now - retention()
local reply = { 1 }
local found, scanned, chunk = 0, 0, 200
while found < limit and scanned < scan do
  local batch = redis.call('ZRANGEBYSCORE', SENT, '(' .. int(cutoff), '+inf', 'WITHSCORES', 'LIMIT', scanned, chunk)
  if #batch == 0 then
    break
  end
  for i = 1, #batch, 2 do
    local m = batch[i]
    scanned = scanned + 1
    local at = tonumber(redis.call('ZSCORE', VIS, m) or 0)
    local count, first = rx_of(m)
    local state = 'delayed'
    if at <= now then
      state = 'visible'
    elseif count then
      state = 'in_flight'
    end
    if state == wanted then
      local n = #reply
      reply[n + 1] = tonumber(m)
      reply[n + 2] = tonumber(batch[i + 1])
      reply[n + 3] = count or 0
      reply[n + 4] = first or -1
      reply[n + 5] = redis.call('HGET', MSG, m)
      found = found + 1
      if found >= limit then
        break
      end
    end
  end
end
return reply
