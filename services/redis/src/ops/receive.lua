-- receive: delivers up to N receivable messages, hiding each until now + visibility timeout;
-- counts the delivery, keeps the first receive time and numbers the delivery
-- '<counter>-<salt>': the queue's counter makes it new, so a handle of an earlier delivery no
-- longer matches; the caller's random salt keeps it new even if a Redis failure rolled the
-- counter back (AOF everysec, asynchronous replicas).
-- Standard queues: messages in (visible_at, seq) order.
-- FIFO queues: groups oldest head first (the ready zset); from each group its head and the
-- receivable messages after it, in seq order, up to N in all. A group delivers only once its
-- ready_at has passed (nothing of it in flight, its head visible); a group that delivered
-- waits until the new visibility timeout ends. Groups whose ready_at has passed move from
-- wait to ready first (at most 1000 per call, longest waiting first: only when more became
-- ready at once can a younger head among them go before an older one). With a request
-- attempt id, an answer given for that id within the window is answered again (same
-- deliveries, same handles, messages deleted or expired since left out) and nothing
-- changes; a new non-empty answer is remembered under the id. Empty answers are not
-- remembered: a long poll retries with the same id until something comes.
-- Messages whose retention has ended are deleted on the way, never delivered.
-- Dead letters: with moves allowed (ARGV[7]) on a queue with a redrive policy (meta
-- max_receives), a receivable message already received max_receives times is not delivered
-- but answered as a move for the caller to carry out (transfer_out.lua and the rest); on a
-- FIFO queue its group delivers nothing past it. Retry backoff (meta backoff): the k-th
-- delivery hides a message for the visibility timeout plus b(k) (RetryBackoff::delay_ms, with
-- the caller's random unit fraction of that delivery).
-- KEYS: the queue's keys (see the prelude).
-- ARGV[1] now
-- ARGV[2] most messages to deliver
-- ARGV[3] visibility timeout in ms
-- ARGV[4] salt: a random number (decimal, below 2^20) chosen by the caller for this call
-- ARGV[5] request attempt id ('' = none; FIFO queues only)
-- ARGV[6] how long an attempt id is remembered, in ms (FIFO queues)
-- ARGV[7] '1' if messages may be answered as moves, '0' if not (the dead-letter queue is
--         known to be missing)
-- ARGV[8], ...: per delivery of this call, in order, a unit fraction in [0, 1) (jitter)
-- Reply: {0} if the queue does not exist, else {1, uid, next_visible_at (-1: none), salt,
--         number of moves, their seqs, then per message: seq, sent_at, receive_count,
--         first_received_at, delivery counter, message (JSON)}
if redis.call('EXISTS', META) == 0 then
  return { 0 }
end
local now = tonumber(ARGV[1])
local max = tonumber(ARGV[2])
local hidden_until = now + tonumber(ARGV[3])
local keep = retention()
local cutoff = now - keep
local attempt = FIFO and ARGV[5] ~= '' and ARGV[5]
local uid = redis.call('HGET', META, 'uid')
local policy = redis.call('HMGET', META, 'max_receives', 'backoff')
local move_at = ARGV[7] == '1' and policy[1] and tonumber(policy[1])
local backoff = nil
if policy[2] and policy[2] ~= '' then
  local base, most, jitter = string.match(policy[2], '^(%d+) (%d+) ([01])$')
  backoff = { tonumber(base), tonumber(most), jitter == '1' }
end
-- RetryBackoff::delay_ms in ms for the `count`-th delivery (same arithmetic).
local function delay(count, unit)
  if not backoff or count < 2 then
    return 0
  end
  local full = math.min(backoff[2], backoff[1] * 2 ^ math.min(count - 2, 32))
  if not backoff[3] or full == 0 then
    return full
  end
  local half = math.floor(full / 2)
  unit = math.min(math.max(unit or 0, 0), 1)
  return half + math.floor((full - half) * unit)
end
local moves = {}
local items = {}
local function should_move(m)
  return move_at and (rx_of(m) or 0) >= move_at
end

if FIFO then
  local window = tonumber(ARGV[6])
  forget_before(ATTEMPT, ATTEMPT_AT, now - window, 16)
  local record = attempt and redis.call('HGET', ATTEMPT, attempt)
  if record then
    -- '<answered_at> <salt> <next_visible_at>', then per message
    -- ' <member>,<sent_at>,<count>,<first_received_at>,<delivery counter>'.
    local at, salt, next_at, rest = string.match(record, '^(%d+) (%d+) (%-?%d+)(.*)$')
    if tonumber(at) + window > now then
      local reply = { 1, uid, tonumber(next_at), tonumber(salt), 0 }
      for m, sent_at, count, first, delivery in string.gmatch(rest, ' (%d+),(%d+),(%d+),(%d+),(%d+)') do
        local body = redis.call('HGET', MSG, m)
        if body and tonumber(sent_at) > cutoff then
          local n = #reply
          reply[n + 1] = tonumber(m)
          reply[n + 2] = tonumber(sent_at)
          reply[n + 3] = tonumber(count)
          reply[n + 4] = tonumber(first)
          reply[n + 5] = tonumber(delivery)
          reply[n + 6] = body
        end
      end
      return reply
    end
  end
end

-- Expired messages first (oldest sent first, bounded), so the candidates below are
-- unexpired unless more than that many awaited the sweep that runs every second; any still
-- expired among them are deleted and skipped.
expire_upto(cutoff, 1000)
local reply = { 1, uid, -1, tonumber(ARGV[4]) }
local record = { '' }
local delivered = 0

-- Hides and counts one delivery; answers until when it is hidden.
local function deliver(m, sent_at)
  delivered = delivered + 1
  local count, first = rx_of(m)
  count = (count or 0) + 1
  first = first or now
  local until_at = hidden_until + delay(count, tonumber(ARGV[7 + delivered]))
  local delivery = redis.call('HINCRBY', META, 'delivery', 1)
  redis.call('HSET', RX, m, int(count) .. ':' .. int(first) .. ':' .. int(delivery) .. '-' .. ARGV[4])
  redis.call('ZADD', VIS, int(until_at), m)
  redis.call('ZADD', RCV, int(until_at), m)
  local n = #items
  items[n + 1] = tonumber(m)
  items[n + 2] = sent_at
  items[n + 3] = count
  items[n + 4] = first
  items[n + 5] = delivery
  items[n + 6] = redis.call('HGET', MSG, m)
  if attempt then
    record[#record + 1] = m .. ',' .. int(sent_at) .. ',' .. int(count) .. ',' .. int(first) .. ',' .. int(delivery)
  end
  return until_at
end

-- The reply: header, moves, deliveries.
local function answer()
  local r = { reply[1], reply[2], reply[3], reply[4], #moves }
  for _, m in ipairs(moves) do
    r[#r + 1] = tonumber(m)
  end
  for _, v in ipairs(items) do
    r[#r + 1] = v
  end
  return r
end

if not FIFO then
  -- A few spare candidates make up for expired ones among them.
  local candidates = redis.call('ZRANGEBYSCORE', VIS, '-inf', int(now), 'LIMIT', 0, max + 16)
  for _, m in ipairs(candidates) do
    if delivered >= max then
      break
    end
    local sent_at = tonumber(redis.call('ZSCORE', SENT, m))
    if not sent_at or sent_at <= cutoff then
      remove_message(m)
    elseif should_move(m) then
      moves[#moves + 1] = m
    else
      deliver(m, sent_at)
    end
  end
  reply[3] = next_visible(now, keep)
  return answer()
end

-- FIFO. Groups touched by the expiry above first, then those whose wait is over.
settle_dirty(now)
for _, g in ipairs(redis.call('ZRANGEBYSCORE', WAIT, '-inf', int(now), 'LIMIT', 0, 1000)) do
  local head = group_members(g, nil, 1)[1]
  if head then
    redis.call('ZREM', WAIT, g)
    redis.call('ZADD', READY, tonumber(head), g)
  else
    settle(g, now)
  end
end
-- Walk ready groups by head seq. Every group visited either delivers or leaves ready, so the
-- bound on visits only matters when clocks disagree; `seen` skips a group met again after its
-- score changed.
local seen = {}
local visits = 0
local from = '-inf'
while delivered < max and visits < max + 64 do
  local groups = redis.call('ZRANGEBYSCORE', READY, from, '+inf', 'WITHSCORES', 'LIMIT', 0, 16)
  if #groups == 0 then
    break
  end
  for i = 1, #groups, 2 do
    if delivered >= max or visits >= max + 64 then
      break
    end
    local g = groups[i]
    from = '(' .. groups[i + 1]
    if not seen[g] then
      seen[g] = true
      visits = visits + 1
      local ready_at = tonumber(redis.call('HGET', GROUP, g) or 0)
      if ready_at > now then
        -- Ready on a later clock than this caller's.
        place(g, ready_at, nil, now)
      else
        local taken = 0
        local group_until = now
        local after = nil
        local more = true
        while more and delivered < max do
          local batch = group_members(g, after, 16)
          more = #batch == 16
          for _, m in ipairs(batch) do
            local sent_at = tonumber(redis.call('ZSCORE', SENT, m))
            if not sent_at or sent_at <= cutoff then
              remove_message(m)
            elseif tonumber(redis.call('ZSCORE', VIS, m)) > now then
              more = false
              break
            elseif should_move(m) then
              -- Nothing of the group goes past it (order); once moved, the rest may follow.
              moves[#moves + 1] = m
              more = false
              break
            else
              group_until = math.max(group_until, deliver(m, sent_at))
              taken = taken + 1
              if delivered >= max then
                break
              end
            end
            after = m
          end
        end
        if taken > 0 and group_until > now then
          place(g, group_until, nil, now)
        else
          settle(g, now)
        end
      end
    end
  end
end
settle_dirty(now)
-- The hint: when the first waiting group is released, or sooner when the oldest message
-- expires (an expiring message in flight releases its group early).
local first_wait = redis.call('ZRANGE', WAIT, 0, 0, 'WITHSCORES')
if #first_wait == 2 then
  reply[3] = tonumber(first_wait[2])
  local oldest = redis.call('ZRANGE', SENT, 0, 0, 'WITHSCORES')
  if #oldest == 2 and tonumber(oldest[2]) + keep < reply[3] then
    reply[3] = math.max(tonumber(oldest[2]) + keep, now)
  end
end
if attempt and delivered > 0 then
  record[1] = int(now) .. ' ' .. ARGV[4] .. ' ' .. int(reply[3])
  redis.call('HSET', ATTEMPT, attempt, table.concat(record, ' '))
  redis.call('ZADD', ATTEMPT_AT, int(now), attempt)
end
return answer()
