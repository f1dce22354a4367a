-- Replace the held tokens by the actual usage, once. Returns 1 if applied, 0 if the
-- reservation is already settled/released or forgotten.
-- KEYS: 1 reservation hash, 2 expiry zset, 3.. counters.  ARGV: 1 id, 2 actual tokens
local held = redis.call('HMGET', KEYS[1], 'state', 'tokens')
if not held[1] then
  return 0
end
local tokens = tonumber(held[2])
local actual = tonumber(ARGV[2])
for i = 3, #KEYS do
  -- A counter gone means its window is long over: re-creating it would leak a key.
  if redis.call('EXISTS', KEYS[i]) == 1 then
    if held[1] == 'reserved' then
      redis.call('HINCRBY', KEYS[i], 'reserved', -tokens)
    end
    redis.call('HINCRBY', KEYS[i], 'settled', actual)
  end
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
