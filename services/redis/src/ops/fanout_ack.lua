-- fanout_ack: the last step of a fan-out (see fanout.rs), in the topic's slot: forgets outbox
-- entries whose every delivery was made and counts those deliveries, each entry only if it was
-- still pending, so the counters count once whoever acknowledges (publisher or recoveries).
-- KEYS: the topic's keys (see publish.lua): meta, counters, dedup, dedup-at, outbox,
--       outbox-order
-- ARGV[1], ...: per entry: entry id, n = number of deliveries, then n pairs: subscription id,
--         'delivered' or 'failed'
-- Reply: how many deliveries the entries forgotten now had
local COUNTERS, OUTBOX, ORDER = KEYS[2], KEYS[5], KEYS[6]
local entries = {}
local i = 1
while i <= #ARGV do
  local n = tonumber(ARGV[i + 1])
  if not n or i + 1 + 2 * n > #ARGV then
    return redis.error_reply('ERR fanout_ack: malformed arguments')
  end
  local counts = {}
  for k = 1, n do
    local what = ARGV[i + 2 * k + 1]
    if what ~= 'delivered' and what ~= 'failed' then
      return redis.error_reply('ERR fanout_ack: unknown outcome ' .. what)
    end
    counts[k] = ARGV[i + 2 * k] .. ':' .. what
  end
  entries[#entries + 1] = { id = ARGV[i], counts = counts }
  i = i + 2 + 2 * n
end
local made = 0
for _, e in ipairs(entries) do
  if redis.call('HDEL', OUTBOX, e.id) == 1 then
    redis.call('ZREM', ORDER, e.id)
    for _, field in ipairs(e.counts) do
      redis.call('HINCRBY', COUNTERS, field, 1)
    end
    made = made + #e.counts
  end
end
return made
