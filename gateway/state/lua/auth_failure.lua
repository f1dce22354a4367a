-- Count one failed key check of a client address in a sliding window; answer when the oldest
-- of the newest `limit` failures leaves the window if there are `limit` of them (the address is
-- refused until then), else false.
-- KEYS: 1 the address's failures (zset member -> time ms).
-- ARGV: 1 now ms, 2 window ms, 3 limit, 4 a member unique to this failure
local now, window, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('ZADD', KEYS[1], now, ARGV[4])
local n = redis.call('ZCARD', KEYS[1])
if n > limit then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - limit - 1)
  n = limit
end
redis.call('PEXPIRE', KEYS[1], window)
if n >= limit then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return tostring(tonumber(oldest[2]) + window)
end
return false
