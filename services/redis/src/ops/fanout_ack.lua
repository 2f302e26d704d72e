-- fanout_ack: the last step of a fan-out (see fanout.rs), in the topic's slot: forgets outbox
-- entries whose every delivery was made and counts those deliveries, each entry only if it was
-- still pending, so the counters count once whoever acknowledges (publisher or recoveries).
-- A copy with a payload that no queue took (neither its queue nor a dead-letter queue) is
-- released here, once, with the entry: 'R' in the topic's payload log.
-- KEYS: the topic's keys (see publish.lua): meta, counters, dedup, dedup-at, outbox,
--       outbox-order, plog
-- ARGV[1], ...: per entry: entry id, n = number of deliveries, then n triples: subscription
--         id, 'delivered' or 'failed', the payload tag of a copy to release ('' = none)
-- Reply: how many deliveries the entries forgotten now had
local COUNTERS, OUTBOX, ORDER, PLOG = KEYS[2], KEYS[5], KEYS[6], KEYS[7]
local entries = {}
local i = 1
while i <= #ARGV do
  local n = tonumber(ARGV[i + 1])
  if not n or i + 1 + 3 * n > #ARGV then
    return redis.error_reply('ERR fanout_ack: malformed arguments')
  end
  local counts, released = {}, {}
  for k = 1, n do
    local base = i + 3 * k - 1
    local what = ARGV[base + 1]
    if what ~= 'delivered' and what ~= 'failed' then
      return redis.error_reply('ERR fanout_ack: unknown outcome ' .. what)
    end
    counts[k] = ARGV[base] .. ':' .. what
    if ARGV[base + 2] ~= '' then
      released[#released + 1] = ARGV[base + 2]
    end
  end
  entries[#entries + 1] = { id = ARGV[i], counts = counts, released = released }
  i = i + 2 + 3 * n
end
local made = 0
for _, e in ipairs(entries) do
  if redis.call('HDEL', OUTBOX, e.id) == 1 then
    redis.call('ZREM', ORDER, e.id)
    for _, field in ipairs(e.counts) do
      redis.call('HINCRBY', COUNTERS, field, 1)
    end
    for _, tag in ipairs(e.released) do
      redis.call('XADD', PLOG, '*', 'k', 'R', 't', tag)
    end
    made = made + #e.counts
  end
end
return made
