-- Shared prelude of every queue script (scripts.rs prepends it). Each queue script takes the
-- same KEYS, all under the queue's hash tag (one cluster slot): eleven for a standard queue,
-- twenty for a FIFO queue (which is how a script tells them apart):
--   KEYS[1] meta  hash: uid, config (JSON), retention (ms), max_depth ('' = unbounded),
--                 created_at, updated_at, seq (last seq issued), delivery (last delivery issued),
--                 stored_bytes (the sum of `size`; absent = 0),
--                 max_receives (the redrive policy's max_receive_count, '' = none), backoff
--                 ('<base ms> <max ms> <jitter 0|1>', '' = none)
--   KEYS[2] vis   zset: every message; member = 16-digit zero-padded seq, score = visible_at
--   KEYS[3] rcv   zset: the messages received at least once, same score as in vis
--   KEYS[4] sent  zset: every message, score = sent_at
--   KEYS[5] msg   hash: member -> the immutable message (JSON: id, body, attributes, group)
--   KEYS[6] rx    hash: member -> 'receive_count:first_received_at:delivery', where delivery is
--                 '<counter>-<salt>' (see receive.lua)
-- FIFO queues only:
--   KEYS[7]  ready      zset: groups that may deliver now, score = seq of their head (oldest
--                       head first)
--   KEYS[8]  wait       zset: the other non-empty groups, score = ready_at
--   KEYS[9]  group      hash: group -> ready_at, the latest visible_at of its head and of its
--                       received messages (a group delivers only once ready_at <= now)
--   KEYS[10] gmsg       zset: every message as '<len(group)>:<group> <member>', score 0, so
--                       ZRANGEBYLEX lists one group's messages in seq order
--   KEYS[11] mgrp       hash: member -> group
--   KEYS[12] dedup      hash: deduplication key ('q:<id>', or 'g:<len>:<group> <id>' when the
--                       scope is the message group) -> '<seq> <accepted_at> <message id>'
--   KEYS[13] dedup-at   zset: deduplication keys, score = accepted_at (clean-up)
--   KEYS[14] attempt    hash: receive request attempt id -> the answer it got (receive.lua)
--   KEYS[15] attempt-at zset: attempt ids, score = when answered (clean-up)
-- Invariants of a FIFO queue: a group is non-empty iff it is in `group`, and then it is in
-- exactly one of `ready` and `wait`. The received messages of a group are always a prefix of
-- its messages (a receive takes a group's messages from its head on), so ready_at is the
-- latest visible_at over the head and that prefix.
-- Times are epoch milliseconds. "now" always arrives in ARGV from the caller's clock: no
-- script reads the server's clock. Every script checks that the queue exists (and whatever
-- else it must) before it changes anything.
-- Every queue, last (KEYS[7..9] or KEYS[16..18]):
--   out      hash: transfer id -> intent of a move leaving this queue (JSON; transfer_out.lua)
--   applied  zset: transfer ids applied into this queue, score = when (transfer_apply.lua)
--   size     hash: member -> the message's size as max_message_bytes counts it; their sum is
--            the meta field stored_bytes. Every script that adds a message calls add_size,
--            every removal goes through remove_message (purge and queue deletion drop both
--            wholesale), so the sum moves in the same script as the messages.
--   pay      hash: member -> payload tag '<len(message id)>:<message id><payload key>', for the
--            messages whose body is in a payload store only; kept by add_size and
--            remove_message beside size.
--   plog     stream: the queue's payload events (see payload_event). Not one of the queue's
--            own keys: it outlives the queue, so a deletion's Released events stay readable.
-- Payload events: one 'A' (added) per payload message a send stores, one 'R' (released) per
-- payload message that leaves for good (delete, expiry, purge, queue deletion); a move out
-- (transfer_out) and in (transfer_apply, transfer_revert, fanout_apply: a copy's 'A' is the
-- publish's, in the topic's log) records nothing. A deletion or re-creation that drops `out`
-- appends one 'M' per payload intent (release_intents), settled in the destination's slot by
-- transfer_settle.lua, which appends the 'R' there if the move never arrived.
local META, VIS, RCV, SENT, MSG, RX = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
-- put_queue and delete_queue also take the queue's fence key after these (KEYS[12] or
-- KEYS[21]; see tenant_delete_begin.lua). QUEUE_KEYS counts the queue's own keys (the payload
-- log, after them, is not one).
local QUEUE_KEYS, FENCE = #KEYS - 1, nil
if #KEYS == 12 or #KEYS == 21 then
  QUEUE_KEYS, FENCE = #KEYS - 2, KEYS[#KEYS]
end
local FIFO = QUEUE_KEYS == 19
local OUT, APPLIED, SIZES, PAY = KEYS[QUEUE_KEYS - 3], KEYS[QUEUE_KEYS - 2], KEYS[QUEUE_KEYS - 1], KEYS[QUEUE_KEYS]
local PLOG = KEYS[QUEUE_KEYS + 1]
local READY, WAIT, GROUP, GMSG, MGRP = KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local DEDUP, DEDUP_AT, ATTEMPT, ATTEMPT_AT = KEYS[12], KEYS[13], KEYS[14], KEYS[15]
-- FIFO: groups whose messages changed during this script; settle_dirty places them again.
local dirty = {}

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

-- FIFO: how a group's messages start in gmsg. Length-prefixed, so that no group's prefix
-- begins another's whatever characters group ids contain.
local function group_prefix(g)
  return #g .. ':' .. g .. ' '
end

-- FIFO: up to `count` of a group's members in seq order, after member `after` (nil: from its
-- head).
local function group_members(g, after, count)
  local p = group_prefix(g)
  local from = '[' .. p
  if after then
    from = '(' .. p .. after
  end
  local items = redis.call('ZRANGEBYLEX', GMSG, from, '[' .. p .. ':', 'LIMIT', 0, count)
  for i, item in ipairs(items) do
    items[i] = string.sub(item, #p + 1)
  end
  return items
end

-- FIFO: records a group's ready_at and files it under ready (scored by its head's seq) or
-- wait. Answers true when the group was not in ready before and is now (a wake-up is due).
local function place(g, ready_at, head, now)
  dirty[g] = nil
  redis.call('HSET', GROUP, g, int(ready_at))
  if ready_at <= now then
    redis.call('ZREM', WAIT, g)
    return redis.call('ZADD', READY, tonumber(head), g) == 1
  end
  redis.call('ZREM', READY, g)
  redis.call('ZADD', WAIT, int(ready_at), g)
  return false
end

-- FIFO: recomputes a group's ready_at from its head and received prefix and places it (or
-- forgets it when it is empty). Costs one look per received message of the group.
local function settle(g, now)
  dirty[g] = nil
  local head = group_members(g, nil, 1)[1]
  if not head then
    redis.call('ZREM', READY, g)
    redis.call('ZREM', WAIT, g)
    redis.call('HDEL', GROUP, g)
    return false
  end
  local ready_at = tonumber(redis.call('ZSCORE', VIS, head))
  local after = nil
  local more = true
  while more do
    local batch = group_members(g, after, 32)
    more = #batch == 32
    for _, m in ipairs(batch) do
      local at = redis.call('ZSCORE', RCV, m)
      if not at then
        more = false
        break
      end
      ready_at = math.max(ready_at, tonumber(at))
      after = m
    end
  end
  return place(g, ready_at, head, now)
end

-- FIFO: settles every group marked dirty; true if one of them became ready.
local function settle_dirty(now)
  local woke = false
  local groups = {}
  for g in pairs(dirty) do
    groups[#groups + 1] = g
  end
  for _, g in ipairs(groups) do
    if settle(g, now) then
      woke = true
    end
  end
  return woke
end

-- Appends a payload event ('A' added, 'R' released) of the message with payload tag `tag`.
local function payload_event(kind, tag)
  redis.call('XADD', PLOG, '*', 'k', kind, 't', tag)
end

-- Unlinks the queue's own keys except `applied`, which outlives a deletion for its window
-- (ARGV `window` ms: it expires then, and a re-creation keeps it): a move or fan-out copy
-- applied before the deletion and repeated by recovery after it is then answered as applied
-- rather than made again elsewhere (or its payload released a second time).
local function unlink_queue_keys(window)
  local keys = {}
  for i = 1, QUEUE_KEYS do
    if KEYS[i] ~= APPLIED then
      keys[#keys + 1] = KEYS[i]
    end
  end
  redis.call('UNLINK', unpack(keys))
  if window then
    redis.call('PEXPIRE', APPLIED, window)
  else
    redis.call('PERSIST', APPLIED)
  end
end

-- The reply of an apply into a queue that no longer exists: 0, then per item (its id at
-- ARGV[first], ARGV[first + stride], ...) 1 if it was applied before the deletion (the
-- `applied` ids outlive it), else 0.
local function applied_before_deletion(first, stride)
  local gone = { 0 }
  for i = first, #ARGV, stride do
    gone[#gone + 1] = redis.call('ZSCORE', APPLIED, ARGV[i]) and 1 or 0
  end
  return gone
end

-- Records the size of message m, just added, and adds it to the queue's stored_bytes; with a
-- payload tag ('' or nil: none), records its payload reference too.
local function add_size(m, size, tag)
  size = tonumber(size) or 0
  redis.call('HSET', SIZES, m, int(size))
  redis.call('HINCRBY', META, 'stored_bytes', int(size))
  if tag and tag ~= '' then
    redis.call('HSET', PAY, m, tag)
  end
end

-- Releases every payload message the queue holds (before a purge or deletion drops `pay`
-- wholesale): one 'R' per entry of `pay`, which holds payload messages only.
local function release_all()
  local entries = redis.call('HGETALL', PAY)
  for i = 2, #entries, 2 do
    payload_event('R', entries[i])
  end
end

-- Before a deletion or re-creation drops `out`: the payload messages in move intents. Such a
-- message left this queue, and its apply at the destination may or may not have run, so it
-- can be neither released here (the destination may hold it) nor forgotten (its payload would
-- leak: nothing else names it once `out` is gone). One 'M' ("maybe released") entry per
-- intent carrying a payload hands the question to the destination's slot, where the payload
-- reader settles it (transfer_settle.lua; see ops/payload_events.rs): released there unless
-- the transfer id was applied. Fields: t the tag, x the transfer id, q this queue's id
-- (`<tenant>/<queue>`, whose tenant the destination shares), d the destination's name, at
-- the intent's time. An intent naming no destination could never be applied: released here.
local function release_intents(queue_id)
  local entries = redis.call('HGETALL', OUT)
  for i = 1, #entries, 2 do
    local intent = cjson.decode(entries[i + 1])
    if type(intent.pay) == 'string' and intent.pay ~= '' then
      local dest = intent.dest
      if dest == '' then
        -- Redrive to the source its dead-letter record names (as transfers.rs resolves it).
        local x = cjson.decode(intent.msg).x
        dest = type(x) == 'table' and x.source_queue or nil
      end
      if type(dest) == 'string' and dest ~= '' then
        redis.call('XADD', PLOG, '*', 'k', 'M', 't', intent.pay, 'x', entries[i], 'q', queue_id,
          'd', dest, 'at', intent.at)
      else
        payload_event('R', intent.pay)
      end
    end
  end
end

-- Removes message m from every structure; `moving` (a move out) keeps its payload alive,
-- otherwise a payload message is released.
local function remove_message(m, moving)
  local size = redis.call('HGET', SIZES, m)
  if size then
    redis.call('HDEL', SIZES, m)
    redis.call('HINCRBY', META, 'stored_bytes', -tonumber(size))
  end
  local tag = redis.call('HGET', PAY, m)
  if tag then
    redis.call('HDEL', PAY, m)
    if not moving then
      payload_event('R', tag)
    end
  end
  redis.call('ZREM', VIS, m)
  redis.call('ZREM', RCV, m)
  redis.call('ZREM', SENT, m)
  redis.call('HDEL', MSG, m)
  redis.call('HDEL', RX, m)
  if FIFO then
    local g = redis.call('HGET', MGRP, m)
    if g then
      redis.call('ZREM', GMSG, group_prefix(g) .. m)
      redis.call('HDEL', MGRP, m)
      dirty[g] = true
    end
  end
end

-- FIFO: removes up to `limit` records of a clean-up zset (and their hash fields) whose time is
-- at or before `cutoff`.
local function forget_before(hash, zset, cutoff, limit)
  local old = redis.call('ZRANGEBYSCORE', zset, '-inf', int(cutoff), 'LIMIT', 0, limit)
  if #old > 0 then
    redis.call('HDEL', hash, unpack(old))
    redis.call('ZREM', zset, unpack(old))
  end
  return #old
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

-- Counts by state and stored bytes at `now` with expired messages left out (exactly while at
-- most 1000 await the sweep), and the oldest unexpired sent_at (-1: none). Visible:
-- visible_at <= now; in flight: hidden and received before; delayed: hidden and never
-- received.
local function stats(now)
  local cutoff = now - retention()
  local visible = redis.call('ZCOUNT', VIS, '-inf', int(now))
  local hidden = redis.call('ZCOUNT', VIS, '(' .. int(now), '+inf')
  local in_flight = redis.call('ZCOUNT', RCV, '(' .. int(now), '+inf')
  local delayed = hidden - in_flight
  local bytes = tonumber(redis.call('HGET', META, 'stored_bytes') or '0')
  local old = redis.call('ZRANGEBYSCORE', SENT, '-inf', int(cutoff), 'LIMIT', 0, 1000)
  for _, m in ipairs(old) do
    bytes = bytes - tonumber(redis.call('HGET', SIZES, m) or '0')
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
  return { visible, in_flight, delayed, oldest, math.max(bytes, 0) }
end

-- The reply that describes a queue: {1, uid, created_at, updated_at, config, visible,
-- in_flight, delayed, oldest_sent_at, stored_bytes}.
local function describe(now)
  local meta = redis.call('HMGET', META, 'uid', 'created_at', 'updated_at', 'config')
  local s = stats(now)
  return { 1, meta[1], tonumber(meta[2]), tonumber(meta[3]), meta[4], s[1], s[2], s[3], s[4], s[5] }
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

