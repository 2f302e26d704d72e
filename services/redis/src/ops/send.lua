-- send: stores a batch of messages, each accepted or refused on its own (a queue holding
-- max_depth messages refuses the excess), then publishes one wake-up.
-- FIFO queues: each message joins the end of its group; a message whose deduplication key
-- (its id, prefixed by its group when the queue's dedup_scope is 'message_group') was accepted
-- less than the window before now is a duplicate: nothing is stored and the original's seq and
-- message id are answered (also when the original was received or deleted since, and for a
-- second entry of the same batch). Duplicates are answered even when the queue is full.
-- KEYS: the queue's keys (see the prelude).
-- ARGV[1] now (becomes each message's sent_at)
-- ARGV[2] wake channel
-- ARGV[3] wake payload
-- ARGV[4] deduplication window in ms (FIFO queues)
-- ARGV[5], ...: per message, visible_at, the message (JSON), its size and its payload tag
--         ('' = none; see the prelude); FIFO queues add the message id, the group id and the
--         deduplication id ('' = none)
-- A stored message with a payload records its 'A' event; a duplicate records nothing.
-- Reply: {0} if the queue does not exist, else {1, ...} with per message: seq or 0 (refused);
--         FIFO queues follow each with the original's message id when it was a duplicate
--         (then the seq is the original's), '' otherwise
if redis.call('EXISTS', META) == 0 then
  return { 0 }
end
local now = tonumber(ARGV[1])
local max_depth = tonumber(redis.call('HGET', META, 'max_depth'))
local depth = redis.call('ZCARD', SENT)
local reply = { 1 }
local accepted = 0
local step, window, by_group = 4, 0, false
if FIFO then
  step = 7
  window = tonumber(ARGV[4])
  by_group = redis.call('HGET', META, 'dedup_scope') == 'message_group'
  -- Records past the window, a few more than this batch may add, so they never pile up.
  forget_before(DEDUP, DEDUP_AT, now - window, math.floor(2 * (#ARGV - 4) / step) + 8)
end
for i = 5, #ARGV, step do
  local dkey, original = nil, nil
  if FIFO and ARGV[i + 6] ~= '' then
    if by_group then
      dkey = 'g:' .. group_prefix(ARGV[i + 5]) .. ARGV[i + 6]
    else
      dkey = 'q:' .. ARGV[i + 6]
    end
    local record = redis.call('HGET', DEDUP, dkey)
    if record then
      local seq, at, id = string.match(record, '^(%d+) (%d+) (.*)$')
      if tonumber(at) + window > now then
        original = { tonumber(seq), id }
      end
    end
  end
  if original then
    reply[#reply + 1] = original[1]
    reply[#reply + 1] = original[2]
  elseif max_depth and depth >= max_depth then
    reply[#reply + 1] = 0
    if FIFO then
      reply[#reply + 1] = ''
    end
  else
    local seq = redis.call('HINCRBY', META, 'seq', 1)
    local m = member(seq)
    redis.call('HSET', MSG, m, ARGV[i + 1])
    add_size(m, ARGV[i + 2], ARGV[i + 3])
    if ARGV[i + 3] ~= '' then
      payload_event('A', ARGV[i + 3])
    end
    redis.call('ZADD', VIS, ARGV[i], m)
    redis.call('ZADD', SENT, ARGV[1], m)
    depth = depth + 1
    accepted = accepted + 1
    reply[#reply + 1] = seq
    if FIFO then
      local g = ARGV[i + 5]
      redis.call('ZADD', GMSG, 0, group_prefix(g) .. m)
      redis.call('HSET', MGRP, m, g)
      if redis.call('HEXISTS', GROUP, g) == 0 then
        -- A new (or emptied) group: this message is its head.
        place(g, tonumber(ARGV[i]), m, now)
      end
      if dkey then
        redis.call('HSET', DEDUP, dkey, int(seq) .. ' ' .. ARGV[1] .. ' ' .. ARGV[i + 4])
        redis.call('ZADD', DEDUP_AT, ARGV[1], dkey)
      end
      reply[#reply + 1] = ''
    end
  end
end
if accepted > 0 then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return reply
