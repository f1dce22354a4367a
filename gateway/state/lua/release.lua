-- Give the held tokens back, once. Returns 1 if applied, 0 if already final or expired.
-- KEYS: 1 reservation hash, 2 expiry zset, 3.. counters.  ARGV: 1 id
local held = redis.call('HMGET', KEYS[1], 'state', 'tokens')
if not held[1] then
  return 0
end
if held[1] == 'reserved' then
  local tokens = tonumber(held[2])
  for i = 3, #KEYS do
    if redis.call('EXISTS', KEYS[i]) == 1 then
      redis.call('HINCRBY', KEYS[i], 'reserved', -tokens)
    end
  end
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return held[1] == 'reserved' and 1 or 0
