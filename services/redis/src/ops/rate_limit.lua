-- rate_limit: one GCRA step for a tenant's request (the arithmetic of sluice_engine::gcra):
-- the key holds the bucket's theoretical arrival time (TAT, microseconds on the callers'
-- clocks); a TAT at most `burst` intervals ahead of now admits the request and moves on by one
-- interval. Every gateway on this Redis calls it, so they share one bucket per tenant.
-- KEYS[1] {P:<tenant>}:rate  string: the TAT (µs); expires when the bucket is full again
-- ARGV[1] now (µs)
-- ARGV[2] interval (µs per request, ≥ 1)
-- ARGV[3] burst (≥ 1)
-- Reply: {1, 0} admitted; {0, wait} refused, wait = µs until a request would be admitted
local now = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then
  tat = now
end
local new_tat = tat + interval
local allow_at = new_tat - interval * burst
if now < allow_at then
  return { 0, allow_at - now }
end
-- Past the TAT the bucket is full, the same as no key: idle tenants leave nothing behind.
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX',
  math.max(1, math.ceil((new_tat - now) / 1000)))
return { 1, 0 }
