-- Replace the held tokens by the actual usage, once. Returns
--    1  applied (also for a reservation the sweep expired: a late settle charges the usage);
--   -1  already final (settled or released): a retried settle, whose first reply was lost,
--       changes nothing;
--    0  unknown: never held here, or forgotten (Redis restarted empty).
-- A settled reservation stays as a marker (its state only) for ARGV[3] ms, which is what
-- tells a retry from an unknown reservation.
-- The amount is checked before anything is written: a script that fails half-way keeps
-- its earlier writes (Redis has no rollback), so it must not fail half-way.
-- KEYS: 1 reservation hash, 2 expiry zset, 3.. counters.  ARGV: 1 id, 2 actual tokens, 3 marker ttl_ms
if not string.match(ARGV[2], '^%d+$') or #ARGV[2] > 15 then
  return redis.error_reply('ERR settle amount must be an integer of at most 15 digits, got ' .. ARGV[2])
end
local held = redis.call('HMGET', KEYS[1], 'state', 'tokens')
if not held[1] then
  return 0
end
if held[1] == 'settled' or held[1] == 'released' then
  return -1
end
local tokens = tonumber(held[2])
for i = 3, #KEYS do
  -- A counter gone means its window is long over: re-creating it would leak a key.
  if redis.call('EXISTS', KEYS[i]) == 1 then
    if held[1] == 'reserved' then
      redis.call('HINCRBY', KEYS[i], 'reserved', -tokens)
    end
    redis.call('HINCRBY', KEYS[i], 'settled', ARGV[2])
  end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'state', 'settled')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
