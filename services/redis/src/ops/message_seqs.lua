-- message_seqs: the seqs of the queue's stored messages above a seq, ascending. Seqs are
-- handed out one by one (meta `seq` is the last), so the script walks them, asking `msg` for
-- each: bounded per call, it reports how far it got and the caller goes on from there.
-- KEYS: the queue's keys (see the prelude).
-- ARGV[1] after: answer seqs above this one
-- ARGV[2] most seqs to answer
-- ARGV[3] most seqs to look at
-- Reply: {0} if the queue does not exist, else {1, last seq issued, looked up to, seqs...}
if redis.call('EXISTS', META) == 0 then
  return { 0 }
end
local last = tonumber(redis.call('HGET', META, 'seq') or '0')
local after = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local budget = tonumber(ARGV[3])
local reply = { 1, last, 0 }
local s = after
while #reply - 3 < limit and s < last and s - after < budget do
  s = s + 1
  if redis.call('HEXISTS', MSG, member(s)) == 1 then
    reply[#reply + 1] = s
  end
end
reply[3] = s
return reply
