-- transfer_due: the queues (or topics) recovery should look at now, with their registration tokens.
-- KEYS[1] {P}:transfers, KEYS[2] {P}:transfer-regs (see transfer_register.lua); or the same
-- pair of fan-outs, {P}:fanouts and {P}:fanout-regs (see fanout_register.lua)
-- ARGV[1] now
-- ARGV[2] most queues to answer
-- Reply: {queue id, token ('' if none), ...}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local reply = {}
for _, id in ipairs(due) do
  reply[#reply + 1] = id
  reply[#reply + 1] = redis.call('HGET', KEYS[2], id) or ''
end
return reply
