-- Check and charge one budget window atomically and at most once per token (DESIGN.md §3, §10).
--
-- KEYS[1]  the window's hash: fields "c:<dimension>" are counters, "t:<token>" first verdicts
-- KEYS[2]  the subject's window index: a sorted set of its window hashes, scored by window end
-- ARGV[1]  idempotency token (input topic-partition-offset, or delivery key + attempt)
-- ARGV[2]  milliseconds the hash lives from now (until a little after the window ends)
-- ARGV[3]  the window's end, seconds since the epoch (its score in the index)
-- ARGV[4]  now, seconds since the epoch (index entries of windows ended before it are dropped)
-- ARGV[5..] triples: dimension name, cap (-1 = uncapped), increment
--
-- Returns {verdict, exhausted dimension or "", used after, ...} with one used value per triple,
-- in the order given. Amounts travel as decimal strings: Lua numbers are doubles and cjson and
-- tostring print only 14 significant digits, so only comparisons use numbers (exact < 2^53).
-- The first accepted reply for a token is stored with it and returned again on a retry, with no
-- second increment: an aborted and retried Kafka batch never double-counts. A refused charge
-- writes nothing at all: counters only grow within a window, so a retried refusal is refused
-- again, and a flood of refused charges leaves the hash as it was (DESIGN.md §10 "Limits").
-- Stored tokens live exactly as long as their window's hash. A window's first accepted charge
-- files its hash in the subject's index, so reading a subject's usage never scans the keyspace.

local key = KEYS[1]
local token_field = "t:" .. ARGV[1]

local stored = redis.call("HGET", key, token_field)
if stored then
  return cjson.decode(stored)
end

local dims = {}
for i = 5, #ARGV, 3 do
  local name = ARGV[i]
  local used = redis.call("HGET", key, "c:" .. name) or "0"
  dims[#dims + 1] = {name = name, cap = tonumber(ARGV[i + 1]), inc = tonumber(ARGV[i + 2]),
                     inc_text = ARGV[i + 2], used = used}
end

local exhausted = ""
for _, d in ipairs(dims) do
  if d.cap >= 0 and tonumber(d.used) + d.inc > d.cap then
    exhausted = d.name
    break
  end
end

local fresh = exhausted == "" and redis.call("EXISTS", key) == 0
local reply = {exhausted == "" and "ok" or "exhausted", exhausted}
for _, d in ipairs(dims) do
  if exhausted == "" and d.inc > 0 then
    redis.call("HINCRBY", key, "c:" .. d.name, d.inc_text)
    d.used = redis.call("HGET", key, "c:" .. d.name)
  end
  reply[#reply + 1] = d.used
end

if exhausted == "" then
  redis.call("HSET", key, token_field, cjson.encode(reply))
  redis.call("PEXPIRE", key, ARGV[2])
end
if fresh then
  local index = KEYS[2]
  redis.call("ZREMRANGEBYSCORE", index, "-inf", "(" .. ARGV[4])
  redis.call("ZADD", index, ARGV[3], key)
  if redis.call("PTTL", index) < tonumber(ARGV[2]) then
    redis.call("PEXPIRE", index, ARGV[2])
  end
end
return reply
