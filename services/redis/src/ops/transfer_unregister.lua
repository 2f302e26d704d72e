-- transfer_unregister: drops a queue from the due index of moves if its registration is still
-- the one recovery looked at (same token); a registration made since stays.
-- KEYS[1] {P}:transfers, KEYS[2] {P}:transfer-regs (see transfer_register.lua); or the same
-- pair of fan-outs, {P}:fanouts and {P}:fanout-regs (see fanout_register.lua)
-- ARGV[1] queue id
-- ARGV[2] the token recovery read ('' = none)
-- Reply: 1 if dropped, 0 if a newer registration stays
if (redis.call('HGET', KEYS[2], ARGV[1]) or '') ~= ARGV[2] then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
