-- Shared prefix of reserve.lua and status.lua (concatenated in Python; Redis
-- scripts cannot import). Expires this org's reservations whose TTL passed and
-- returns their held tokens, so a crashed replica cannot leak them.
-- It touches counters that are not in KEYS: they carry the same {org:...} hash
-- tag as the declared keys, hence the same cluster slot.
local function sweep(expiry_key, resv_prefix, now_ms, forget_ms)
  local ids = redis.call('ZRANGEBYSCORE', expiry_key, '-inf', now_ms, 'LIMIT', 0, 100)
  for _, id in ipairs(ids) do
    local rkey = resv_prefix .. id
    local held = redis.call('HMGET', rkey, 'state', 'tokens', 'counters')
    if held[1] == 'reserved' then
      local tokens = tonumber(held[2])
      for _, counter in ipairs(cjson.decode(held[3])) do
        if redis.call('EXISTS', counter) == 1 then
          redis.call('HINCRBY', counter, 'reserved', -tokens)
        end
      end
      -- Kept a while so that a late settle still charges the actual usage.
      redis.call('HSET', rkey, 'state', 'expired')
      redis.call('PEXPIRE', rkey, forget_ms)
    end
    redis.call('ZREM', expiry_key, id)
  end
end

local function extend(key, ttl_ms)
  if redis.call('PTTL', key) < tonumber(ttl_ms) then
    redis.call('PEXPIRE', key, ttl_ms)
  end
end
