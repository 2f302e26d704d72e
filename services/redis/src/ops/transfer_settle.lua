-- transfer_settle: settles, in the destination's slot, the 'M' ("maybe released") entries a
-- source queue's deletion or re-creation left for the payload messages of its pending move
-- intents (release_intents in the prelude; ops/payload_events.rs runs this when it reads one).
-- Per entry, atomically with any apply of the same transfer here (one slot):
--   * its transfer id is in `applied`, or its tag in `pay`: the apply ran, so this queue holds
--     or held the message and releases it in due course (or did): nothing to do;
--   * otherwise the move never arrived and never will: the id is recorded as applied (a
--     void: a late transfer_apply of it, from a mover that still held the intent, finds it
--     applied and inserts nothing) and one 'R' goes into this queue's log.
-- A repeat (a crash before the reader acknowledged, or a second gateway reading the same
-- entry) finds the id recorded and appends nothing: one 'R' per entry whoever settles it.
-- Works whether the queue exists, was deleted (its `applied` outlives it for the window) or
-- never existed (the void then keeps `applied` alive for the window itself).
-- KEYS: the destination queue's keys (see the prelude).
-- ARGV[1] how long applied transfer ids are remembered, in ms (transfer_apply's window)
-- ARGV[2], ...: per entry: transfer id, payload tag, the intent's time (the void's score:
--         it lives a window past the move, longer than any live apply of it takes to come)
-- Reply: per entry, 1 if released now, 0 if the id was applied (or settled) before
-- The tags this queue holds, read at most once and only if some id is not in `applied`: an
-- apply's id is forgotten a window after it, so an entry settled later than that (a reader
-- stopped for a day) must not be taken for a void while the message is still here. Costs one
-- look per payload message of the queue, on a path taken only by moves whose source was
-- deleted before their apply.
local held = nil
local function holds(tag)
  if not held then
    held = {}
    if redis.call('EXISTS', META) == 1 then
      for _, t in ipairs(redis.call('HVALS', PAY)) do
        held[t] = true
      end
    end
  end
  return held[tag]
end
local reply = {}
local voided = false
for i = 2, #ARGV, 3 do
  local id = ARGV[i]
  if redis.call('ZSCORE', APPLIED, id) or holds(ARGV[i + 1]) then
    reply[#reply + 1] = 0
  else
    redis.call('ZADD', APPLIED, ARGV[i + 2], id)
    payload_event('R', ARGV[i + 1])
    voided = true
    reply[#reply + 1] = 1
  end
end
-- Without the queue nobody trims `applied`: it must expire, but not before the void's window.
if voided and redis.call('EXISTS', META) == 0 then
  local ttl = redis.call('PTTL', APPLIED)
  if ttl < tonumber(ARGV[1]) then
    redis.call('PEXPIRE', APPLIED, ARGV[1])
  end
end
return reply
