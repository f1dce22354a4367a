-- Give the held tokens back, once. Returns 1 if applied, -1 if already final (settled,
-- released, or expired: the sweep gave the tokens back), 0 if unknown.
-- Every answer leaves a 'released' marker (a settled one stays as it is) for ARGV[2] ms:
-- a retried settle then changes nothing, and a reserve that arrives after its release
-- (sent before Redis hung, run once it answered again, its reply long given up on)
-- finds the id taken and holds nothing.
-- KEYS: 1 reservation hash, 2 expiry zset, 3.. counters.  ARGV: 1 id, 2 marker ttl_ms
local held = redis.call('HMGET', KEYS[1], 'state', 'tokens')
local state = held[1]
if state == 'settled' or state == 'released' then
  return -1
end
if state == 'reserved' then
  local tokens = tonumber(held[2])
  for i = 3, #KEYS do
    if redis.call('EXISTS', KEYS[i]) == 1 then
      redis.call('HINCRBY', KEYS[i], 'reserved', -tokens)
    end
  end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'state', 'released')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[1])
if state == 'reserved' then
  return 1
elseif state then
  return -1
end
return 0
