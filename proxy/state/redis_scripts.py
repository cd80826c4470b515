"""The Lua scripts of the Redis store (:mod:`proxy.state.redis`), one atomic step each.

Key layout (``P`` is ``state.key_prefix``, ``T`` the tenant hash, ``H`` the first 20 hex
digits of the SHA-1 of a conversation id, ``N`` of a namespace):

``P:ids``                 hash  conversation id → its tenant (ids are unique store-wide)
``P:convs``               zset  conversation id → last seen (listing, TTL sweep, bound)
``P:t:T:convs``           zset  the same, per tenant
``P:evid`` / ``P:log``    counter / hash id → event JSON (``GET /gate/events``, capped)
``P:t:T:n:N``             zset  conversation id → namespace version of its last change
``P:t:T:n:N:v``           counter: the namespace version
``P:t:T:c:H``             hash  ``meta`` (record JSON), ``etag``, ``ls`` (last seen),
                          ``sp`` (splice log ``ver:keep;``…), ``fl`` (log floor), ``ev``
                          (event counter), ``ss``/``st`` (token stats and their seq)
``P:t:T:c:H:h``           list  history digests
``P:t:T:c:H:m``           hash  digest → message JSON; ``b:KEY`` → text blob
``P:t:T:c:H:t``           hash  seq → timeline entry JSON (the last ``max_timeline``)
``P:t:T:c:H:e``           hash  seq → event JSON (the last ``max_events``)
``P:t:T:s:HANDLE``        string spill record JSON (expires with the spill)

Every key of a conversation and of its namespace expires ``ttl`` seconds after the
conversation's last commit; the store-wide ones are bounded by :data:`SWEEP` and caps.
Standalone Redis (or a primary with replicas): the scripts touch keys they compute, so
Redis Cluster is not supported.
"""

from __future__ import annotations

__all__ = ["COMMIT", "LIST", "SIDE", "SPLICE_LOG", "SWEEP", "SYNC"]

#: Splices kept per conversation (older ones move the log floor up).
SPLICE_LOG = 16

_CHUNK = """
local function chunked(cmd, key, args, first, last, step)
  local j = first
  while j <= last do
    local k = math.min(last, j + step - 1)
    redis.call(cmd, key, unpack(args, j, k))
    j = k + 1
  end
end
local function set_stats(ckey, seq, json)
  if seq == '' then return end
  local have = tonumber(redis.call('HGET', ckey, 'ss') or '-1')
  if tonumber(seq) >= have then redis.call('HSET', ckey, 'ss', seq, 'st', json) end
end
local function capped_hset(key, seq, json, cap)
  redis.call('HSET', key, seq, json)
  local s = tonumber(seq)
  if s > cap then redis.call('HDEL', key, s - cap) end
end
"""

#: KEYS: ids, convs, tenant convs, ns zset, ns ver, conv, hist, msgs, timeline, events,
#: evid, log. ARGV: cid, expect ('' = create), etag, meta, last_seen, keep, ttl,
#: max_timeline, max_events, max_log, tenant, conv key of the id's owner prefix
#: ('P:t:'), conv hash suffix (':c:H'), stats seq, stats json, then counted groups:
#: appended digests; message/blob field-value pairs; timeline seq-json pairs; event
#: jsons; log jsons.
COMMIT = (
    _CHUNK
    + """
local cid = ARGV[1]
local cur = redis.call('HGET', KEYS[6], 'etag')
if ARGV[2] == '' then
  if redis.call('HSETNX', KEYS[1], cid, ARGV[11]) == 0 then
    local owner = redis.call('HGET', KEYS[1], cid)
    if cur or redis.call('EXISTS', ARGV[12] .. owner .. ARGV[13]) == 1 then return {0, 'exists'} end
    redis.call('HSET', KEYS[1], cid, ARGV[11])
  end
  if not cur then redis.call('DEL', KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]) end
elseif cur ~= ARGV[2] then
  return {0, 'conflict'}
end
local keep = tonumber(ARGV[6])
local hlen = redis.call('LLEN', KEYS[7])
if keep > hlen then return {0, 'conflict'} end
local before = tonumber(redis.call('GET', KEYS[5]) or '0')
local ver = redis.call('INCR', KEYS[5])
local i = 16
local n = tonumber(ARGV[i]); i = i + 1
if keep < hlen then
  if keep == 0 then redis.call('DEL', KEYS[7]) else redis.call('LTRIM', KEYS[7], 0, keep - 1) end
end
if n > 0 then chunked('RPUSH', KEYS[7], ARGV, i, i + n - 1, 4000) end
i = i + n
if keep < hlen or n > 0 then
  local sp = (redis.call('HGET', KEYS[6], 'sp') or '') .. ver .. ':' .. keep .. ';'
  local count = select(2, string.gsub(sp, ';', ''))
  while count > """
    + str(SPLICE_LOG)
    + """ do
    local cut = string.find(sp, ';', 1, true)
    local dropped = string.match(string.sub(sp, 1, cut), '^(%d+):')
    redis.call('HSET', KEYS[6], 'fl', dropped)
    sp = string.sub(sp, cut + 1)
    count = count - 1
  end
  redis.call('HSET', KEYS[6], 'sp', sp)
end
redis.call('HSET', KEYS[6], 'id', cid, 'meta', ARGV[4], 'etag', ARGV[3], 'ls', ARGV[5])
n = tonumber(ARGV[i]); i = i + 1
if n > 0 then chunked('HSET', KEYS[8], ARGV, i, i + 2 * n - 1, 4000) end
i = i + 2 * n
n = tonumber(ARGV[i]); i = i + 1
for j = 0, n - 1 do capped_hset(KEYS[9], ARGV[i + 2 * j], ARGV[i + 2 * j + 1], tonumber(ARGV[8])) end
i = i + 2 * n
n = tonumber(ARGV[i]); i = i + 1
for j = 0, n - 1 do
  local s = redis.call('HINCRBY', KEYS[6], 'ev', 1)
  capped_hset(KEYS[10], s, ARGV[i + j], tonumber(ARGV[9]))
end
i = i + n
n = tonumber(ARGV[i]); i = i + 1
for j = 0, n - 1 do
  local id = redis.call('INCR', KEYS[11])
  capped_hset(KEYS[12], id, ARGV[i + j], tonumber(ARGV[10]))
end
set_stats(KEYS[6], ARGV[14], ARGV[15])
redis.call('ZADD', KEYS[4], ver, cid)
redis.call('ZADD', KEYS[2], ARGV[5], cid)
redis.call('ZADD', KEYS[3], ARGV[5], cid)
local ttl = tonumber(ARGV[7])
for k = 4, 10 do redis.call('EXPIRE', KEYS[k], ttl) end
return {1, '', before, ver}
"""
)

#: KEYS: conv, msgs, timeline, events, evid, log. ARGV: has conversation ('1'/'0'),
#: max_timeline, max_events, max_log, stats seq, stats json, then counted groups:
#: message field-value pairs; timeline seq-json pairs; event jsons; log jsons. The
#: conversation's parts are written only while it exists (never resurrected).
SIDE = (
    _CHUNK
    + """
local live = ARGV[1] == '1' and redis.call('EXISTS', KEYS[1]) == 1
local i = 7
local n = tonumber(ARGV[i]); i = i + 1
if live and n > 0 then chunked('HSET', KEYS[2], ARGV, i, i + 2 * n - 1, 4000) end
i = i + 2 * n
n = tonumber(ARGV[i]); i = i + 1
if live then
  for j = 0, n - 1 do capped_hset(KEYS[3], ARGV[i + 2 * j], ARGV[i + 2 * j + 1], tonumber(ARGV[2])) end
end
i = i + 2 * n
n = tonumber(ARGV[i]); i = i + 1
if live then
  for j = 0, n - 1 do
    local s = redis.call('HINCRBY', KEYS[1], 'ev', 1)
    capped_hset(KEYS[4], s, ARGV[i + j], tonumber(ARGV[3]))
  end
end
i = i + n
n = tonumber(ARGV[i]); i = i + 1
for j = 0, n - 1 do
  local id = redis.call('INCR', KEYS[5])
  capped_hset(KEYS[6], id, ARGV[i + j], tonumber(ARGV[4]))
end
if live then
  set_stats(KEYS[1], ARGV[5], ARGV[6])
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then
    for k = 2, 4 do redis.call('PEXPIRE', KEYS[k], ttl) end
  end
end
return live and 1 or 0
"""
)

#: KEYS: ns zset, ns ver. ARGV: cursor (what the caller knows), after (page start),
#: bodies (longest tail sent with its messages), page size, conv key prefix ('P:t:T:c:'),
#: the number n of known pairs, n pairs (cid, etag the caller holds: that conversation
#: is left out while it still has that etag), then the ids to reload in full. Returns {next cursor, more, entries}; an entry is
#: {cid, ver, meta, etag, evseq, stats, keep, tail digests, tail bodies}.
SYNC = """
local cursor = tonumber(ARGV[1])
local after = tonumber(ARGV[2])
local bodies = tonumber(ARGV[3])
local page = tonumber(ARGV[4])
local ver = tonumber(redis.call('GET', KEYS[2]) or '0')
local out = {}
local known = {}
local nknown = tonumber(ARGV[6])
for j = 7, 6 + 2 * nknown, 2 do known[ARGV[j]] = ARGV[j + 1] end
local function entry(cid, score, full)
  local base = ARGV[5] .. string.sub(redis.sha1hex(cid), 1, 20)
  local f = redis.call('HMGET', base, 'meta', 'etag', 'sp', 'fl', 'ev', 'st')
  if not f[1] then
    redis.call('ZREM', KEYS[1], cid)
    return
  end
  if not full and known[cid] == f[2] then return end
  local hlen = redis.call('LLEN', base .. ':h')
  local keep = hlen
  if full or cursor < tonumber(f[4] or '0') then
    keep = 0
  else
    for v, k in string.gmatch(f[3] or '', '(%d+):(%d+);') do
      if tonumber(v) > cursor and tonumber(k) < keep then keep = tonumber(k) end
    end
  end
  local tail = {}
  if keep < hlen then tail = redis.call('LRANGE', base .. ':h', keep, -1) end
  local got = {}
  if #tail > 0 and #tail <= bodies then got = redis.call('HMGET', base .. ':m', unpack(tail)) end
  out[#out + 1] = {cid, tostring(score), f[1], f[2], f[5] or '0', f[6] or '', keep, tail, got}
end
local changed = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. after, '+inf', 'WITHSCORES', 'LIMIT', 0, page)
local more = 0
local next_cursor = ver
if #changed >= 2 * page then
  more = 1
  next_cursor = tonumber(changed[#changed])
end
for j = 1, #changed, 2 do entry(changed[j], changed[j + 1], false) end
for j = 7 + 2 * nknown, #ARGV do
  local s = redis.call('ZSCORE', KEYS[1], ARGV[j])
  entry(ARGV[j], s or 0, true)
end
return {next_cursor, more, out}
"""

#: KEYS: a convs zset (store-wide or a tenant's), ids. ARGV: limit, key prefix ('P:t:').
#: Returns {count, entries}; an entry is {cid, meta, etag, evseq, stats}.
LIST = """
local ids = redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
local out = {}
for _, cid in ipairs(ids) do
  local owner = redis.call('HGET', KEYS[2], cid)
  if owner then
    local f = redis.call('HMGET', ARGV[2] .. owner .. ':c:' .. string.sub(redis.sha1hex(cid), 1, 20),
      'meta', 'etag', 'ev', 'st')
    if f[1] then out[#out + 1] = {cid, f[1], f[2], f[3] or '0', f[4] or ''} end
  end
end
return {redis.call('ZCARD', KEYS[1]), out}
"""

#: KEYS: convs, ids. ARGV: cutoff (last seen before it: expired), max conversations,
#: key prefix ('P:t:'), batch. Forgets expired and surplus conversations (their keys are
#: deleted; a namespace's zset drops them when it is next synced). Returns how many.
SWEEP = """
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, tonumber(ARGV[4]))
local surplus = redis.call('ZCARD', KEYS[1]) - #gone - tonumber(ARGV[2])
if surplus > 0 then
  local extra = redis.call('ZRANGE', KEYS[1], #gone, #gone + math.min(surplus, tonumber(ARGV[4])) - 1)
  for _, cid in ipairs(extra) do gone[#gone + 1] = cid end
end
for _, cid in ipairs(gone) do
  local owner = redis.call('HGET', KEYS[2], cid)
  redis.call('ZREM', KEYS[1], cid)
  redis.call('HDEL', KEYS[2], cid)
  if owner then
    local base = ARGV[3] .. owner .. ':c:' .. string.sub(redis.sha1hex(cid), 1, 20)
    redis.call('ZREM', ARGV[3] .. owner .. ':convs', cid)
    redis.call('DEL', base, base .. ':h', base .. ':m', base .. ':t', base .. ':e')
  end
end
return #gone
"""
