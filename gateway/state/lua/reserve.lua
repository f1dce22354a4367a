-- Hold ARGV tokens on every counter, or on none (returns {0, index, reserved, settled}
-- of the first counter that cannot cover it). A retried reservation id is held once.
-- KEYS: 1 reservation hash, 2 expiry zset, 3 counter index zset, 4.. counters
-- ARGV: 1 id, 2 tokens, 3 now_ms, 4 reservation ttl_ms, 5 forget_ms, 6 held ttl_ms,
--       7 reservation key prefix, 8 enforce (1/0),
--       then per counter, from 9: limit, counter ttl_ms, reset_at_ms, meta json
local tokens = tonumber(ARGV[2])
local now_ms = tonumber(ARGV[3])
sweep(KEYS[2], ARGV[7], now_ms, ARGV[5])

local n = #KEYS - 3
local fresh = redis.call('EXISTS', KEYS[1]) == 0
local out = {1}
for i = 1, n do
  local c = redis.call('HMGET', KEYS[i + 3], 'reserved', 'settled')
  local reserved, settled = tonumber(c[1]) or 0, tonumber(c[2]) or 0
  if fresh and ARGV[8] == '1' and reserved + settled + tokens > tonumber(ARGV[9 + (i - 1) * 4]) then
    return {0, i, reserved, settled}
  end
  out[2 * i] = reserved
  out[2 * i + 1] = settled
end
if not fresh then
  return out
end

local counters = {}
for i = 1, n do
  local base = 9 + (i - 1) * 4
  local key = KEYS[i + 3]
  if redis.call('EXISTS', key) == 0 then
    redis.call('HSET', key, 'reserved', 0, 'settled', 0, 'meta', ARGV[base + 3])
  end
  redis.call('HINCRBY', key, 'reserved', tokens)
  redis.call('HSET', key, 'limit', ARGV[base])
  redis.call('PEXPIRE', key, ARGV[base + 1])
  redis.call('ZADD', KEYS[3], ARGV[base + 2], key)
  out[2 * i] = out[2 * i] + tokens
  counters[i] = key
end
extend(KEYS[3], ARGV[6])
redis.call('HSET', KEYS[1], 'state', 'reserved', 'tokens', tokens, 'counters', cjson.encode(counters))
-- Outlives the counters, so the sweep can always find what to give back.
redis.call('PEXPIRE', KEYS[1], ARGV[6])
redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[4]), ARGV[1])
extend(KEYS[2], ARGV[6])
return out
