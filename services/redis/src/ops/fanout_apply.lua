-- fanout_apply: the apply step of a fan-out into this queue (see fanout.rs): inserts each copy
-- of a publication as a new message (a new seq at the end of the queue, never received, its
-- sent_at the publish), unless its apply id ('<publication message id>/<subscription id>') was
-- applied here before, which makes the step idempotent (a publisher on another gateway and
-- recovery may repeat it). In 'copy' mode the queue may refuse a copy: larger than the
-- config's max_message_bytes, or the queue holds max_depth messages; a refusal is remembered
-- beside the applied ids ('!L<id>', '!F<id>') so a repeat answers the same and the copy goes to
-- one place only. In 'copy' mode a copy is visible after the queue's delay_seconds; in 'dead'
-- mode (the delivery's dead-letter queue) it is taken whatever the depth and size, visible at
-- its sent_at, like a dead-letter move. Copies meet no deduplication.
-- KEYS: the queue's keys (see the prelude).
-- ARGV[1] now
-- ARGV[2] wake channel
-- ARGV[3] wake payload
-- ARGV[4] how long applied ids are remembered, in ms (every id of the queue: moves' too)
-- ARGV[5] 'copy' or 'dead'
-- ARGV[6] how long this call's ids are remembered, in ms (at most ARGV[4]: fan-outs are
--         many more than moves, so their ids are kept for less; they are scored as if
--         applied ARGV[4] - ARGV[6] earlier, so the one trim forgets each in its time)
-- ARGV[7], ...: per copy: apply id, message (JSON), size (as max_message_bytes counts it),
--         sent_at, group ('' = none; FIFO), payload tag ('' = none; its 'A' is in the topic's
--         log, recorded by publish.lua)
-- Reply: {0, per copy: 1 if it was applied before the queue was deleted (its `applied` ids
--         outlive it), else 0} if the queue does not exist, else {1, per copy: 1 inserted now,
--         2 applied before, 3 refused as too large, 4 refused as the queue is full}
if redis.call('EXISTS', META) == 0 then
  local gone = { 0 }
  for i = 7, #ARGV, 6 do
    if redis.call('ZSCORE', APPLIED, ARGV[i]) then
      gone[#gone + 1] = 1
    else
      gone[#gone + 1] = 0
    end
  end
  return gone
end
local mode = ARGV[5]
if mode ~= 'copy' and mode ~= 'dead' then
  return redis.error_reply('ERR fanout_apply: unknown mode')
end
if (#ARGV - 6) % 6 ~= 0 or not tonumber(ARGV[6]) or tonumber(ARGV[6]) > tonumber(ARGV[4]) then
  return redis.error_reply('ERR fanout_apply: malformed arguments')
end
for i = 7, #ARGV, 6 do
  if not tonumber(ARGV[i + 2]) or not tonumber(ARGV[i + 3]) then
    return redis.error_reply('ERR fanout_apply: malformed arguments')
  end
end
local now = tonumber(ARGV[1])
local config = cjson.decode(redis.call('HGET', META, 'config'))
local delay = (tonumber(config.delay_seconds) or 0) * 1000
local max_bytes = tonumber(config.max_message_bytes)
local max_depth = tonumber(redis.call('HGET', META, 'max_depth'))
local depth = redis.call('ZCARD', SENT)
redis.call('ZREMRANGEBYSCORE', APPLIED, '-inf', int(now - tonumber(ARGV[4])))
local applied_at = int(now - (tonumber(ARGV[4]) - tonumber(ARGV[6])))
local reply = { 1 }
local added = 0
for i = 7, #ARGV, 6 do
  local id = ARGV[i]
  local sent_at = tonumber(ARGV[i + 3])
  local answer
  if redis.call('ZSCORE', APPLIED, id) then
    answer = 2
  elseif mode == 'copy' and redis.call('ZSCORE', APPLIED, '!L' .. id) then
    answer = 3
  elseif mode == 'copy' and redis.call('ZSCORE', APPLIED, '!F' .. id) then
    answer = 4
  elseif mode == 'copy' and max_bytes and tonumber(ARGV[i + 2]) > max_bytes then
    redis.call('ZADD', APPLIED, applied_at, '!L' .. id)
    answer = 3
  elseif mode == 'copy' and max_depth and depth >= max_depth then
    redis.call('ZADD', APPLIED, applied_at, '!F' .. id)
    answer = 4
  else
    local visible_at = sent_at
    if mode == 'copy' then
      visible_at = sent_at + delay
    end
    local seq = redis.call('HINCRBY', META, 'seq', 1)
    local m = member(seq)
    redis.call('HSET', MSG, m, ARGV[i + 1])
    add_size(m, ARGV[i + 2], ARGV[i + 5])
    redis.call('ZADD', VIS, int(visible_at), m)
    redis.call('ZADD', SENT, int(sent_at), m)
    if FIFO then
      local g = ARGV[i + 4]
      redis.call('ZADD', GMSG, 0, group_prefix(g) .. m)
      redis.call('HSET', MGRP, m, g)
      if redis.call('HEXISTS', GROUP, g) == 0 then
        place(g, visible_at, m, now)
      end
    end
    redis.call('ZADD', APPLIED, applied_at, id)
    depth = depth + 1
    added = added + 1
    answer = 1
  end
  reply[#reply + 1] = answer
end
if added > 0 then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return reply
