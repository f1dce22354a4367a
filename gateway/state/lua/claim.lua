-- Record a stored response id for an org, or refresh it when it is that org's already; an id
-- another org holds is left as it is (returns 0), so the first owner keeps it.
-- KEYS: 1 the id's entry.  ARGV: 1 org, 2 entry json {"org", "tokens"}, 3 ttl seconds
local held = redis.call('GET', KEYS[1])
if held then
  local ok, entry = pcall(cjson.decode, held)
  if ok and type(entry) == 'table' and entry['org'] ~= ARGV[1] then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
return 1
