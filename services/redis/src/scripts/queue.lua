-- Shared prelude of every queue script (scripts.rs prepends it). Each queue script takes the
-- same six KEYS, all under the queue's hash tag (one cluster slot):
--   KEYS[1] meta  hash: uid, config (JSON), retention (ms), max_depth ('' = unbounded),
--                 created_at, updated_at, seq (last seq issued), delivery (last delivery issued)
--   KEYS[2] vis   zset: every message; member = 16-digit zero-padded seq, score = visible_at
--   KEYS[3] rcv   zset: the messages received at least once, same score as in vis
--   KEYS[4] sent  zset: every message, score = sent_at
--   KEYS[5] msg   hash: member -> the immutable message (JSON: id, body, attributes, group)
--   KEYS[6] rx    hash: member -> 'receive_count:first_received_at:delivery', where delivery is
--                 '<counter>-<salt>' (see receive.lua)
-- Times are epoch milliseconds. "now" always arrives in ARGV from the caller's clock: no
-- script reads the server's clock. Every script checks that the queue exists (and whatever
-- else it must) before it changes anything.
local META, VIS, RCV, SENT, MSG, RX = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]

-- Integers as exact decimal text: tostring switches to exponent form past 14 digits.
local function int(n)
  return string.format('%d', n)
end

local function member(seq)
  return string.format('%016d', seq)
end

local function retention()
  return tonumber(redis.call('HGET', META, 'retention'))
end

local function remove_message(m)
  redis.call('ZREM', VIS, m)
  redis.call('ZREM', RCV, m)
  redis.call('ZREM', SENT, m)
  redis.call('HDEL', MSG, m)
  redis.call('HDEL', RX, m)
end

-- A message's receive record: count, first_received_at (numbers) and delivery (kept as text,
-- compared as text with the one a handle names); nil when it was never received.
local function rx_of(m)
  local v = redis.call('HGET', RX, m)
  if not v then
    return nil
  end
  local count, first, delivery = string.match(v, '^(%d+):(%d+):(%d+%-%d+)$')
  return tonumber(count), tonumber(first), delivery
end

-- Removes up to `limit` messages sent at or before `cutoff` (their retention has ended).
-- Answers how many, and 1 if more remain.
local function expire_upto(cutoff, limit)
  local old = redis.call('ZRANGEBYSCORE', SENT, '-inf', int(cutoff), 'LIMIT', 0, limit)
  for _, m in ipairs(old) do
    remove_message(m)
  end
  local more = 0
  if #old == limit and #redis.call('ZRANGEBYSCORE', SENT, '-inf', int(cutoff), 'LIMIT', 0, 1) > 0 then
    more = 1
  end
  return #old, more
end

-- Counts by state at `now` with expired messages left out (exactly while at most 1000 await
-- the sweep), and the oldest unexpired sent_at (-1: none). Visible: visible_at <= now;
-- in flight: hidden and received before; delayed: hidden and never received.
local function stats(now)
  local cutoff = now - retention()
  local visible = redis.call('ZCOUNT', VIS, '-inf', int(now))
  local hidden = redis.call('ZCOUNT', VIS, '(' .. int(now), '+inf')
  local in_flight = redis.call('ZCOUNT', RCV, '(' .. int(now), '+inf')
  local delayed = hidden - in_flight
  local old = redis.call('ZRANGEBYSCORE', SENT, '-inf', int(cutoff), 'LIMIT', 0, 1000)
  for _, m in ipairs(old) do
    local at = tonumber(redis.call('ZSCORE', VIS, m) or 0)
    if at <= now then
      visible = visible - 1
    elseif redis.call('ZSCORE', RCV, m) then
      in_flight = in_flight - 1
    else
      delayed = delayed - 1
    end
  end
  local first = redis.call('ZRANGEBYSCORE', SENT, '(' .. int(cutoff), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local oldest = -1
  if #first == 2 then
    oldest = tonumber(first[2])
  end
  return { visible, in_flight, delayed, oldest }
end

-- The reply that describes a queue: {1, uid, created_at, updated_at, config, visible,
-- in_flight, delayed, oldest_sent_at}.
local function describe(now)
  local meta = redis.call('HMGET', META, 'uid', 'created_at', 'updated_at', 'config')
  local s = stats(now)
  return { 1, meta[1], tonumber(meta[2]), tonumber(meta[3]), meta[4], s[1], s[2], s[3], s[4] }
end

-- When the next hidden message becomes receivable, skipping those whose retention ends first
-- (they never will): -1 when none. The scan is bounded; past it an early hint is answered,
-- which costs a long poll one extra look.
local function next_visible(now, keep)
  local after = redis.call('ZRANGEBYSCORE', VIS, '(' .. int(now), '+inf', 'WITHSCORES', 'LIMIT', 0, 16)
  for i = 1, #after, 2 do
    local at = tonumber(after[i + 1])
    local sent_at = tonumber(redis.call('ZSCORE', SENT, after[i]) or 0)
    if sent_at + keep > at then
      return at
    end
  end
  if #after == 32 then
    return tonumber(after[2])
  end
  return -1
end

