-- transfer_out: the intent step of moves leaving this queue (see transfers.rs for the whole
-- protocol). Per item, atomically: checks the message may move, records the intent under its
-- transfer id in `out` (the message's full record, so that a revert can put it back exactly:
-- same seq, same scores, same receive record, same group position) and removes the message
-- from every structure of the queue. From here until the ack the message is in neither
-- queue's counts; the caller has registered the queue in the due index before this call, so
-- recovery finds the intent if the caller never finishes.
-- KEYS: the queue's keys (see the prelude).
-- ARGV[1] now
-- ARGV[2] wake channel
-- ARGV[3] wake payload
-- ARGV[4] mode: 'handle' (dead_letter: items are transfer id, queue uid, member, delivery),
--         'auto' (receive's moves: items are transfer id, member) or 'seq' (redrive: same)
-- ARGV[5] 'auto': the receive count from which a message moves (it must also still be
--         receivable); otherwise ''
-- ARGV[6] destination queue name ('' = the source its dead-letter record names)
-- ARGV[7] dead-letter reason to set at the destination ('' = clear the dead-letter record)
-- ARGV[8], ...: the items
-- Reply: {0} if the queue does not exist, else {1, per item: code, intent (JSON) or ''};
--         code 0 = recorded, 1 = invalid handle (another incarnation), 2 = stale handle or
--         message gone, 3 = no longer qualifies ('auto': received meanwhile)
if redis.call('EXISTS', META) == 0 then
  return { 0 }
end
local now = tonumber(ARGV[1])
local mode = ARGV[4]
local cutoff = now - retention()
local uid = redis.call('HGET', META, 'uid')
local step = 2
if mode == 'handle' then
  step = 4
end
local reply = { 1 }
for i = 8, #ARGV, step do
  local id = ARGV[i]
  local m
  local code = 0
  if mode == 'handle' then
    m = ARGV[i + 2]
    if ARGV[i + 1] ~= uid then
      code = 1
    end
  else
    m = ARGV[i + 1]
  end
  local sent_at = false
  if code == 0 then
    sent_at = redis.call('ZSCORE', SENT, m)
    if not sent_at then
      code = 2
    elseif tonumber(sent_at) <= cutoff then
      remove_message(m)
      code = 2
    else
      local count, _, delivery = rx_of(m)
      if mode == 'handle' and (not count or delivery ~= ARGV[i + 3]) then
        code = 2
      elseif mode == 'auto' and ((count or 0) < tonumber(ARGV[5])
          or tonumber(redis.call('ZSCORE', VIS, m)) > now) then
        code = 3
      end
    end
  end
  if code == 0 then
    local intent = {
      msg = redis.call('HGET', MSG, m),
      seq = m,
      vis = redis.call('ZSCORE', VIS, m),
      rcv = redis.call('ZSCORE', RCV, m) or nil,
      sent = sent_at,
      rx = redis.call('HGET', RX, m) or nil,
      size = redis.call('HGET', SIZES, m) or nil,
      pay = redis.call('HGET', PAY, m) or nil,
      dest = ARGV[6],
      at = ARGV[1],
    }
    if ARGV[7] ~= '' then
      intent.reason = ARGV[7]
    end
    if FIFO then
      intent.grp = redis.call('HGET', MGRP, m) or nil
    end
    local json = cjson.encode(intent)
    -- A move: its payload goes with it (the intent keeps the tag for a revert).
    remove_message(m, true)
    redis.call('HSET', OUT, id, json)
    reply[#reply + 1] = 0
    reply[#reply + 1] = json
  else
    reply[#reply + 1] = code
    reply[#reply + 1] = ''
  end
end
-- FIFO: a group whose head left may deliver the rest now.
if FIFO and settle_dirty(now) then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return reply
