-- publish: the commit of a topic publish (see fanout.rs), in the topic's slot. Per
-- publication, in order: FIFO topics check its deduplication id (a duplicate within the window
-- answers the original and records nothing) and assign the next sequence number; every
-- publication counts its filtered-out subscriptions, and one with deliveries is recorded in
-- the outbox, from which it leaves only once every delivery is made (fanout_ack.lua). This
-- script's success is what a publish's 2xx stands on.
-- It also answers the outbox entries the caller must deliver before its own: on a FIFO topic
-- every entry already pending (all have lower numbers), so that no queue gets a later
-- sequence number before an earlier one; on a standard topic the pending entries among the
-- oldest few that are past the grace (their publisher likely died), so a busy topic never
-- leaves them waiting for recovery.
-- KEYS[1] meta          hash: seq (FIFO: last sequence number issued), order (last entry number)
-- KEYS[2] counters      hash: '<subscription>:delivered|filtered_out|failed' -> count
-- KEYS[3] dedup         hash: deduplication id -> '<seq> <accepted_at> <message id>'
-- KEYS[4] dedup-at      zset: deduplication ids, score = accepted_at (clean-up)
-- KEYS[5] outbox        hash: entry id -> '<published_at> <seq (0: none)> <publication JSON>'
-- KEYS[6] outbox-order  zset: entry id -> its number (order)
-- KEYS[7] plog          stream: the topic's payload events (see the queue prelude, queue.lua):
--                       one 'A' per delivery of a new publication with a payload, here, at
--                       the commit the publish's answer stands on
-- ARGV[1] now
-- ARGV[2] 1 for a FIFO topic, else 0
-- ARGV[3] deduplication window in ms
-- ARGV[4] recovery grace in ms
-- ARGV[5] most pending entries to answer (FIFO), or to look at (standard)
-- ARGV[6], ...: per publication: message id, deduplication id ('' = none), number of
--         deliveries, publication JSON, n = number of filtered-out subscriptions, then n ids,
--         then t = number of payload tags (one per delivery when it has a payload, else 0),
--         then t tags
-- Reply: {per publication: 1 (new) or 2 (duplicate), seq (0: none), message id (the
--         original's for a duplicate), entry id ('' = nothing to deliver); then complete (1 if
--         the pending entries below are every one the caller must deliver first, else 0);
--         then per pending entry: entry id, value}
local META, COUNTERS, DEDUP, DEDUP_AT, OUTBOX, ORDER = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local PLOG = KEYS[7]
local now = tonumber(ARGV[1])
local fifo = ARGV[2] == '1'
local window = tonumber(ARGV[3])
local grace = tonumber(ARGV[4])
local limit = tonumber(ARGV[5])

-- Read every argument before changing anything.
local pubs = {}
local i = 6
while i <= #ARGV do
  local n = tonumber(ARGV[i + 4])
  local deliveries = tonumber(ARGV[i + 2])
  if not n or not deliveries or i + 4 + n > #ARGV then
    return redis.error_reply('ERR publish: malformed arguments')
  end
  local filtered = {}
  for k = 1, n do
    filtered[k] = ARGV[i + 4 + k]
  end
  local t = tonumber(ARGV[i + 5 + n])
  if not t or i + 5 + n + t > #ARGV then
    return redis.error_reply('ERR publish: malformed arguments')
  end
  local tags = {}
  for k = 1, t do
    tags[k] = ARGV[i + 5 + n + k]
  end
  pubs[#pubs + 1] = { id = ARGV[i], dedup = ARGV[i + 1], deliveries = deliveries,
    json = ARGV[i + 3], filtered = filtered, tags = tags }
  i = i + 6 + n + t
end

local function int(n)
  return string.format('%d', n)
end

-- What the caller delivers first, read before this call adds its own entries.
local pending, complete = {}, 1
if fifo then
  local ids = redis.call('ZRANGE', ORDER, 0, limit - 1)
  if redis.call('ZCARD', ORDER) > #ids then
    complete = 0
  end
  for _, id in ipairs(ids) do
    pending[#pending + 1] = id
  end
else
  for _, id in ipairs(redis.call('ZRANGE', ORDER, 0, limit - 1)) do
    local value = redis.call('HGET', OUTBOX, id)
    local at = value and tonumber(string.match(value, '^(%d+) '))
    if at and at + grace <= now then
      pending[#pending + 1] = id
    end
  end
end

if fifo then
  -- Records past the window, a few more than this batch may add, so they never pile up.
  local old = redis.call('ZRANGEBYSCORE', DEDUP_AT, '-inf', int(now - window), 'LIMIT', 0, 2 * #pubs + 8)
  if #old > 0 then
    redis.call('HDEL', DEDUP, unpack(old))
    redis.call('ZREM', DEDUP_AT, unpack(old))
  end
end

local reply = {}
for _, p in ipairs(pubs) do
  local original = nil
  if fifo and p.dedup ~= '' then
    local record = redis.call('HGET', DEDUP, p.dedup)
    if record then
      local seq, at, id = string.match(record, '^(%d+) (%d+) (.*)$')
      if tonumber(at) + window > now then
        original = { tonumber(seq), id }
      end
    end
  end
  if original then
    reply[#reply + 1] = 2
    reply[#reply + 1] = original[1]
    reply[#reply + 1] = original[2]
    reply[#reply + 1] = ''
  else
    local seq = 0
    if fifo then
      seq = redis.call('HINCRBY', META, 'seq', 1)
      if p.dedup ~= '' then
        redis.call('HSET', DEDUP, p.dedup, int(seq) .. ' ' .. ARGV[1] .. ' ' .. p.id)
        redis.call('ZADD', DEDUP_AT, ARGV[1], p.dedup)
      end
    end
    for _, s in ipairs(p.filtered) do
      redis.call('HINCRBY', COUNTERS, s .. ':filtered_out', 1)
    end
    local entry = ''
    if p.deliveries > 0 then
      local order = redis.call('HINCRBY', META, 'order', 1)
      entry = string.format('%016d', order)
      redis.call('HSET', OUTBOX, entry, ARGV[1] .. ' ' .. int(seq) .. ' ' .. p.json)
      redis.call('ZADD', ORDER, order, entry)
    end
    for _, tag in ipairs(p.tags) do
      redis.call('XADD', PLOG, '*', 'k', 'A', 't', tag)
    end
    reply[#reply + 1] = 1
    reply[#reply + 1] = seq
    reply[#reply + 1] = p.id
    reply[#reply + 1] = entry
  end
end
reply[#reply + 1] = complete
for _, id in ipairs(pending) do
  reply[#reply + 1] = id
  reply[#reply + 1] = redis.call('HGET', OUTBOX, id) or ''
end
return reply
