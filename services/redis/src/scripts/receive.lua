-- receive: delivers up to N receivable messages in (visible_at, seq) order, hiding each until
-- now + visibility timeout; counts the delivery, keeps the first receive time and numbers the
-- delivery '<counter>-<salt>': the queue's counter makes it new, so a handle of an earlier
-- delivery no longer matches; the caller's random salt keeps it new even if a Redis failure
-- rolled the counter back (AOF everysec, asynchronous replicas).
-- Messages whose retention has ended are deleted on the way, never delivered.
-- KEYS: the queue's six keys (see the prelude).
-- ARGV[1] now
-- ARGV[2] most messages to deliver
-- ARGV[3] visibility timeout in ms
-- ARGV[4] salt: a random number (decimal, below 2^20) chosen by the caller for this call
-- Reply: {0} if the queue does not exist, else {1, uid, next_visible_at (-1: none), then per
--         message: seq, sent_at, receive_count, first_received_at, delivery counter, message
--         (JSON)}
if redis.call('EXISTS', META) == 0 then
  return { 0 }
end
local now = tonumber(ARGV[1])
local max = tonumber(ARGV[2])
local hidden_until = int(now + tonumber(ARGV[3]))
local keep = retention()
local cutoff = now - keep
-- Expired messages first (oldest sent first, bounded), so the candidates below are
-- unexpired unless more than that many awaited the sweep that runs every second; any still
-- expired among them are deleted and skipped, and a few spare candidates make up for them.
expire_upto(cutoff, 1000)
local candidates = redis.call('ZRANGEBYSCORE', VIS, '-inf', int(now), 'LIMIT', 0, max + 16)
local reply = { 1, redis.call('HGET', META, 'uid'), -1 }
local delivered = 0
for _, m in ipairs(candidates) do
  if delivered >= max then
    break
  end
  local sent_at = tonumber(redis.call('ZSCORE', SENT, m))
  if not sent_at or sent_at <= cutoff then
    remove_message(m)
  else
    delivered = delivered + 1
    local count, first = rx_of(m)
    count = (count or 0) + 1
    first = first or now
    local delivery = redis.call('HINCRBY', META, 'delivery', 1)
    redis.call('HSET', RX, m, int(count) .. ':' .. int(first) .. ':' .. int(delivery) .. '-' .. ARGV[4])
    redis.call('ZADD', VIS, hidden_until, m)
    redis.call('ZADD', RCV, hidden_until, m)
    local n = #reply
    reply[n + 1] = tonumber(m)
    reply[n + 2] = sent_at
    reply[n + 3] = count
    reply[n + 4] = first
    reply[n + 5] = delivery
    reply[n + 6] = redis.call('HGET', MSG, m)
  end
end
reply[3] = next_visible(now, keep)
return reply
