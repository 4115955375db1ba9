// The two atomic writes of the Redis binding store (docs/cluster.md#redis-layout). Key layout and value
// format are the reference's, so its schedulers and ours can share one Redis:
//   <prefix>:sandbox:<sandbox_id>  = {"node":{"node_id":"…","endpoint":"…"}}  PX binding_ttl
//   <prefix>:node:<node_id>        = SET of sandbox ids bound to that node  PEXPIRE node_index_ttl
// Keys other than KEYS[] are derived inside the scripts, so the store needs a single Redis (not Cluster),
// version 6.2 or later (SET … GET).

const NODE_OF = `
local function node_of(raw)
  if not raw then return nil end
  local ok, decoded = pcall(cjson.decode, raw)
  if not ok or type(decoded) ~= "table" or type(decoded["node"]) ~= "table" then return nil end
  local id = decoded["node"]["node_id"]
  if type(id) ~= "string" or id == "" then return nil end
  return id
end
`;

/**
 * KEYS[1] binding key, KEYS[2] the node's index set.
 * ARGV[1] value JSON, ARGV[2] node id, ARGV[3] sandbox id, ARGV[4] binding TTL ms, ARGV[5] key prefix,
 * ARGV[6] index TTL ms.
 */
export const RECORD_BINDING_LUA = `${NODE_OF}
local previous_raw = redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[4], "GET")
if previous_raw and previous_raw ~= ARGV[1] then
  local previous = node_of(previous_raw)
  if previous and previous ~= ARGV[2] then
    redis.call("SREM", ARGV[5] .. ":node:" .. previous, ARGV[3])
  end
end
redis.call("SADD", KEYS[2], ARGV[3])
redis.call("PEXPIRE", KEYS[2], ARGV[6])
return 1
`;

/**
 * KEYS[1] the node's index set.
 * ARGV[1] node id, ARGV[2] value JSON ("" when the roster is empty), ARGV[3] binding TTL ms, ARGV[4] key prefix,
 * ARGV[5] index TTL ms, ARGV[6..] the roster (already trimmed and de-duplicated).
 * One SET … GET per roster id (write and read the previous owner at once); a binding already holding this
 * exact value needs no JSON decoding; the index set is added to in batches.
 */
export const RECONCILE_NODE_LUA = `${NODE_OF}
local index = KEYS[1]
local node_id, value, ttl, prefix, index_ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local roster = {}
for i = 6, #ARGV do roster[ARGV[i]] = true end

for _, id in ipairs(redis.call("SMEMBERS", index)) do
  if not roster[id] then
    local key = prefix .. ":sandbox:" .. id
    if node_of(redis.call("GET", key)) == node_id then redis.call("DEL", key) end
    redis.call("SREM", index, id)
  end
end

if #ARGV < 6 then
  redis.call("DEL", index)
  return 1
end

for i = 6, #ARGV do
  local id = ARGV[i]
  local previous_raw = redis.call("SET", prefix .. ":sandbox:" .. id, value, "PX", ttl, "GET")
  if previous_raw and previous_raw ~= value then
    local previous = node_of(previous_raw)
    if previous and previous ~= node_id then
      redis.call("SREM", prefix .. ":node:" .. previous, id)
    end
  end
end
for i = 6, #ARGV, 1000 do
  redis.call("SADD", index, unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call("PEXPIRE", index, index_ttl)
return 1
`;
