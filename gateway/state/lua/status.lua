-- Sweep, then read counters: per counter {reserved, settled, limit, meta}.
-- KEYS: 1 expiry zset, 2.. counters.  ARGV: 1 now_ms, 2 forget_ms, 3 reservation key prefix
sweep(KEYS[1], ARGV[3], tonumber(ARGV[1]), ARGV[2])
local out = {}
for i = 2, #KEYS do
  local c = redis.call('HMGET', KEYS[i], 'reserved', 'settled', 'limit', 'meta')
  out[#out + 1] = tonumber(c[1]) or 0
  out[#out + 1] = tonumber(c[2]) or 0
  out[#out + 1] = c[3] or ''
  out[#out + 1] = c[4] or ''
end
return out
