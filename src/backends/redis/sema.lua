#!lua name=sema
-- SPDX-License-Identifier: MIT
-- sema.lua - the Redis back end's operations, a Redis Functions library (FUNCTION LOAD once
-- per connection, FCALL sema for every operation; src/backends/redis/redis.c). The library's
-- helpers are defined once, when it is loaded; a call only runs them. See docs/redis.md for
-- the keys and docs/architecture.md for why the work is split this way.
--
-- Every call: KEYS[1] names what it works on (a semaphore's stem, a lease id's key, the name
-- index); ARGV = op, epoch, instance, request id, alive_ms, principal (the token that sent
-- the request with semad --auth, '' without), flags ('1' or '0': that token is an admin and
-- may end any lease; then 'r' when the command is sent again, so it may have run already),
-- then the op's own arguments.
-- A call reads Redis's clock (TIME), checks the epoch, answers a retried request id from its
-- cache, does its housekeeping (due leases expire, the waiters of dead instances leave, the
-- queue's head is admitted), does its work, and returns:
--   { status, message, now_ms, next_due_ms, acts, stem, counts, result... }
-- every value a string (Lua's numbers would lose digits in cjson and in tostring). `acts` and
-- `counts` are each one string of NUL-separated fields: Redis makes a reply element of every
-- value, at a cost well above one concatenation's; redis.c reads them as arrays.
-- `acts` is a flat list, ACT_LEN fields per act: what happened, in order (public events,
-- and the outcomes of parked requests: the calling instance completes its own at once; those
-- of other instances are kept under :g and the instance is woken by PUBLISH).

-- The state of one call, set by main() (a library keeps its upvalues between calls).
local KEYS, ARGV
local OP, EPOCH, INST, RID, ALIVE_MS, PRINC, ADMIN, RETRY
local A = 8 -- first argument of the op
local NOW, NOWUS -- Redis's clock in milliseconds and in microseconds
local function nowus()
  return NOWUS
end
local LID -- the lease id a lease op names
-- (strings: a number passed to redis.call is formatted with %.17g on every call)
local RESULT_TTL_MS = '15000' -- longer than the longest command timeout (10 s): a retry finds it
local TOMB_TTL_MS = '600000'
local HK_MAX = 1000 -- leases expired or waiters admitted per call (the rest: next call, at once)
local VIEW_MAX = 1000
local CAP_MAX = 9007199254740992

-- Lua's own functions as upvalues: a call reaches them without a look-up in the globals (set
-- by main: the globals are not reachable while the library loads).
local fmt, match, concat, floor

-- Integers as strings. Recent ones are kept (bounded): a row's counts and times come back
-- call after call, and string.format costs more than a look-up.
local NMEMO, NMEMO_N = {}, 0
local function N(x)
  local s = NMEMO[x]
  if not s then
    s = fmt('%d', x)
    if NMEMO_N >= 4096 then
      NMEMO, NMEMO_N = {}, 0
    end
    NMEMO[x] = s
    NMEMO_N = NMEMO_N + 1
  end
  return s
end

-- Redis's clock as a string (NOW's), made once per call when first needed
local NOWS
local function nows()
  if not NOWS then
    NOWS = N(NOW)
  end
  return NOWS
end

-- ---- the keys of one semaphore (or lock key): its stem plus a suffix of fixed length ----
local S, KIND, NAME, TAG
local KM, KF, KQ, KW, KL, KX, KI, KA, KG, KS
local KT, KK, KTL, KFW, KEST -- tickets: records, keepalive deadlines, lease id -> ticket id, the
-- weight that left the queue by place (a Fenwick tree, below), the estimate's samples

-- The keys of recent stems are kept (the library lives as long as its Lua state): a call on a
-- semaphore seen lately builds none of its ten strings again. Bounded: short stems only, and
-- the memo starts over past KEYSETS_MAX of them.
local KEYSETS, NKEYSETS, KEYSETS_MAX = {}, 0, 1000
local function keys_of(stem)
  S = stem
  local k = KEYSETS[stem]
  if not k then
    local tag, kind, name = match(stem, '^(sema:{[^}]*})(.):(.*)$')
    k = {tag, kind, name, stem .. ':m', stem .. ':f', stem .. ':q', stem .. ':w', stem .. ':l',
         stem .. ':x', stem .. ':i', stem .. ':a', stem .. ':g', stem .. ':s', stem .. ':t',
         stem .. ':k', stem .. ':tl', stem .. ':fw', stem .. ':est'}
    if #stem <= 200 then
      if NKEYSETS >= KEYSETS_MAX then
        KEYSETS, NKEYSETS = {}, 0
      end
      KEYSETS[stem] = k
      NKEYSETS = NKEYSETS + 1
    end
  end
  TAG, KIND, NAME, KM, KF, KQ, KW, KL, KX, KI, KA, KG, KS =
    k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8], k[9], k[10], k[11], k[12], k[13]
  KT, KK, KTL, KFW, KEST = k[14], k[15], k[16], k[17], k[18]
end

-- Tickets (the section "tickets" below): hooks the shared code calls only while the row
-- counts live tickets (M.nt > 0), and the wait estimate's samples (est_*, taken then too).
local tk_lease_gone, tk_admit, tk_housekeep, tk_next_due, tk_delete_all, tk_resize, fw_left
local fw_prefix
local est_hold, est_queue_grant, tk_run

local ACTS, WAKE
local NONE = {} -- ACTS, WAKE and GRANTED until a call has one: never written to
local REBUILT -- a retry of this call can rebuild its answer (main)
local PUBLIC = {granted = true, released = true, expired = true, revoked = true,
                resized = true, deleted = true}
local M -- the semaphore's row while loaded

local function fields(s)
  local a = {}
  for x in (s .. '\0'):gmatch('([^%z]*)%z') do
    a[#a + 1] = x
  end
  return a
end

-- A lease: weight, fence, ttl, acquired, expires, owner, idempotency key, mode (a lock's
-- mode as requested: '1' shared, '2' exclusive; '0' on a semaphore), principal.
-- Its five numbers also as strings (sw, sf, sttl, sacq, sexp) once made: a lease is formatted
-- once per call, however many places (its record, its act, the result) print it; whoever
-- changes a number clears its string.
local function lstr(l)
  if not l.sw then
    l.sw = N(l.w)
  end
  if not l.sf then
    l.sf = N(l.f)
  end
  if not l.sttl then
    l.sttl = N(l.ttl)
  end
  if not l.sacq then
    l.sacq = N(l.acq)
  end
  if not l.sexp then
    l.sexp = N(l.exp)
  end
  return l
end
local function lpack(l)
  lstr(l)
  return l.sw .. '\0' .. l.sf .. '\0' .. l.sttl .. '\0' .. l.sacq .. '\0' .. l.sexp .. '\0' ..
         l.owner .. '\0' .. l.idem .. '\0' .. l.mode .. '\0' .. l.princ
end
-- (%Z: any byte but NUL, as [^%z] but cheaper to match)
local LPAT = '^(%Z*)%z(%Z*)%z(%Z*)%z(%Z*)%z(%Z*)%z(%Z*)%z(%Z*)%z(%Z*)%z(%Z*)$'
-- A lease read from its record has its strings and its weight (what a release uses); any
-- other number is made from its string when first used.
local LNUM = {w = 'sw', f = 'sf', ttl = 'sttl', acq = 'sacq', exp = 'sexp'}
local LREC = {__index = function(l, k)
  local sk = LNUM[k]
  if sk then
    local v = rawget(l, sk) + 0 -- (a string of ours: `+ 0` parses it once, tonumber twice)
    rawset(l, k, v)
    return v
  end
end}
local function lunpack(s)
  local w, f, ttl, acq, exp, owner, idem, mode, princ = match(s, LPAT)
  return setmetatable({owner = owner, idem = idem, mode = mode, princ = princ, sw = w, sf = f,
                       sttl = ttl, sacq = acq, sexp = exp}, LREC)
end

-- A live lease's record is its id's key, sema:id:LID: 'l', the record's fields, then its
-- semaphore's stem, all NUL-separated; so a release reads its lease, and a grant writes it,
-- in one command. (An earlier version kept the record in the stem's :l hash and 'L' and the
-- stem in the id's key: such a lease is read from :l, marked `old`, and leaves :l when it
-- is written or ends. :x holds every live lease of either kind.)
local IDPAT = '^l(%Z*)%z(%Z*)%z(%Z*)%z(%Z*)%z(%Z*)%z(%Z*)%z(%Z*)%z(%Z*)%z(%Z*)%z(.*)$'
-- The lease in an id key's value v and its stem (nil for anything else: a tombstone, an
-- earlier version's 'L' value, whose stem alone is the second result).
local function lparse(v)
  local w, f, ttl, acq, exp, owner, idem, mode, princ, stem = match(v, IDPAT)
  if not w then
    if string.sub(v, 1, 1) == 'L' then
      return nil, string.sub(v, 2)
    end
    return nil, nil
  end
  return setmetatable({w = w + 0, owner = owner, idem = idem, mode = mode, princ = princ,
                       sw = w, sf = f, sttl = ttl, sacq = acq, sexp = exp}, LREC), stem
end
-- The lease `lid` of this semaphore (S) from its id key's value v (false: none), or nil.
local function lread(lid, v)
  if not v then
    return nil
  end
  local l, stem = lparse(v)
  if stem ~= S then
    return nil
  end
  if l then
    return l
  end
  local rec = redis.call('HGET', KL, lid) -- an earlier version's
  if not rec then
    return nil
  end
  l = lunpack(rec)
  l.old = true
  return l
end
local function lget(lid)
  return lread(lid, redis.call('GET', 'sema:id:' .. lid))
end
-- Write a lease's record, its numbers as strings, as its id key's value.
local function lset(lid, sw, sf, sttl, sacq, sexp, owner, idem, mode, princ)
  redis.call('SET', 'sema:id:' .. lid,
             'l' .. sw .. '\0' .. sf .. '\0' .. sttl .. '\0' .. sacq .. '\0' .. sexp .. '\0' ..
             owner .. '\0' .. idem .. '\0' .. mode .. '\0' .. princ .. '\0' .. S)
end
-- The same from a lease's table (lstr'd or not).
local function lwrite(lid, l)
  lstr(l)
  lset(lid, l.sw, l.sf, l.sttl, l.sacq, l.sexp, l.owner, l.idem, l.mode, l.princ)
  if l.old then
    redis.call('HDEL', KL, lid)
    l.old = nil
  end
end
-- Every live lease of this semaphore: a list of {lease id, lease}, by expiry.
local function lall()
  local ids, out = redis.call('ZRANGE', KX, '0', '-1'), {}
  for i = 1, #ids, 500 do -- (unpack has a bound)
    local ks = {}
    for j = i, math.min(i + 499, #ids) do
      ks[#ks + 1] = 'sema:id:' .. ids[j]
    end
    local vs = redis.call('MGET', unpack(ks))
    for j = 1, #ks do
      local lid = ids[i + j - 1]
      local l = lread(lid, vs[j])
      if l then
        out[#out + 1] = {lid, l}
      end
    end
  end
  return out
end

-- A waiter: instance, weight (0: wait-idle), kind (a acquire, i idle), since, ttl, owner,
-- idempotency key, the lease id it will get, mode, principal.
local function wpack(w)
  return table.concat({w.inst, N(w.w), w.kind, N(w.since), N(w.ttl), w.owner, w.idem, w.lid,
                       w.mode, w.princ}, '\0')
end
local function wunpack(s)
  local a = fields(s)
  return {inst = a[1], w = tonumber(a[2]), kind = a[3], since = tonumber(a[4]),
          ttl = tonumber(a[5]), owner = a[6] or '', idem = a[7] or '', lid = a[8] or '',
          mode = a[9] or '0', princ = a[10] or '', sw = a[2], sttl = a[5]}
end

-- With semad --auth, a lease (or a parked request) is its token's: only that token, or an
-- admin, may end it or take it over.
local function allowed(princ)
  return PRINC == '' or ADMIN == '1' or princ == PRINC
end
local M_OTHER_TOKEN = 'the lease was taken by another token (only its token or an admin may end it)'

-- act: type, waiter id, instance, lease id, weight, fence, ttl, acquired, expires, owner,
-- extra (mode for leases; capacity for resized; the status for a failed waiter)
local OWN -- an act completes a parked request of the calling instance
local function act(typ, wid, inst, lid, l, extra)
  if wid and wid ~= '' and inst == INST then
    OWN = true
  end
  local n = #ACTS
  if n == 0 then
    if l then
      lstr(l) -- the first act (most calls have one): one table of the right size
      ACTS = {typ, wid or '', inst or '', lid or '', l.sw, l.sf, l.sttl, l.sacq, l.sexp,
              l.owner, extra or l.mode}
      return
    end
    ACTS = {}
  end
  ACTS[n + 1] = typ
  ACTS[n + 2] = wid or ''
  ACTS[n + 3] = inst or ''
  ACTS[n + 4] = lid or ''
  if l then
    lstr(l)
    ACTS[n + 5] = l.sw
    ACTS[n + 6] = l.sf
    ACTS[n + 7] = l.sttl
    ACTS[n + 8] = l.sacq
    ACTS[n + 9] = l.sexp
    ACTS[n + 10] = l.owner
  else
    for i = 5, 9 do
      ACTS[n + i] = '0'
    end
    ACTS[n + 10] = ''
  end
  ACTS[n + 11] = extra or (l and l.mode) or ''
end

-- The outcome of a parked request: its own instance completes it. Another instance finds it
-- under :g (woken by a message; its heartbeat collects it too if the message is lost).
local function outcome(typ, wid, w, lid, l, extra)
  extra = extra or (l and l.mode) or ''
  act(typ, wid, w.inst, lid, l, extra)
  if w.inst ~= INST then
    local rec = typ .. '\0' .. lid .. '\0' .. (extra or '') .. '\0' .. (l and lpack(l) or '')
    redis.call('HSET', KG, wid, w.inst .. '\0' .. rec)
    if WAKE == NONE then
      WAKE = {}
    end
    WAKE[w.inst] = true
  end
end

-- Counts of everything (for /healthz and the limits): semaphores, leases, lock keys. They
-- live in the epoch's hash, read by every call with the epoch (run), and every reply tells
-- them; a call that changes one sends the new value.
local STATS = {} -- field -> the count's string (a table kept from call to call)
local function count(field, d) -- d: '1' or '-1'
  STATS[field] = N(redis.call('HINCRBY', 'sema:epoch', field, d))
end
local function locks_now()
  return tonumber(STATS.locks)
end

-- The latest expiry of any lease ever granted: after Redis lost its data, instances know
-- from it how long a holder they can no longer see may still be running. It lives in the
-- epoch's hash (read by every call with the epoch) and is kept a second ahead, so it is
-- written at most once a second, not at every grant.
local HORIZON, HORIZON_S
local function bump_horizon(exp)
  if not HORIZON then
    HORIZON = HORIZON_S + 0
  end
  if exp > HORIZON then
    HORIZON = exp + 1000
    HORIZON_S = N(HORIZON)
    redis.call('HSET', 'sema:epoch', 'horizon', HORIZON_S)
  end
end

-- ---- the row ----
-- `due`: no later than the first time something is due here (a lease's expiry, a dead
-- instance's waiters, the end of a pause), 0 when nothing is; a call before it skips the
-- housekeeping. It may be early (a release leaves it): the housekeeping then finds nothing
-- and sets it right.
-- A call loads the fields its operation uses (acquire and release: a few; every field for the
-- others), and the rest of the row at once if it turns out to need more (a queue to admit, a
-- view): each field read costs Redis's time.
-- nt: live tickets (the tickets section). A new row keeps its fields in this order, the ones
-- acquire and release read first: Redis finds a field of a small hash by reading it from the
-- start.
local MF = {'cap', 'avail', 'held', 'fence', 'nq', 'due', 'nt', 'legacy', 'created', 'seq',
            'wq'}
-- The fields loaded (MFS) and their numbers as loaded (MOLD, in MFS's order; -1: not there
-- yet): only the fields that changed are written. A row loaded in part has MREST as its
-- metatable, which loads the rest on a first look at (or write to) any other field, so
-- every field of the row that is set is in MFS.
local MFS, MOLD
local MF_ACQUIRE = {'cap', 'avail', 'held', 'fence', 'nq', 'due', 'nt'}
local MF_RELEASE = {'avail', 'held', 'nq', 'due', 'nt'}
local MFIELD = {}
for i = 1, #MF do
  MFIELD[MF[i]] = true
end
local MKEY -- the row's key, for the rest of it
local function mrest(m)
  setmetatable(m, nil)
  local v = redis.call('HMGET', MKEY, unpack(MF))
  local was, old, loaded = {}, {}, MOLD or {}
  for i = 1, #MFS do
    was[MFS[i]] = loaded[i]
  end
  for i = 1, #MF do
    local f = MF[i]
    local x = rawget(m, f)
    if x == nil then
      x = tonumber(v[i] or '0')
      rawset(m, f, x)
      old[i] = v[i] and x or -1 -- a field not there yet is written
    else
      old[i] = was[f]
    end
  end
  MFS, MOLD = MF, old
end
local MREST = {__index = function(m, f)
  if MFIELD[f] then
    mrest(m)
    return rawget(m, f)
  end
end, __newindex = function(m, f, x)
  if MFIELD[f] then
    mrest(m)
  end
  rawset(m, f, x)
end}
-- pre: the fields acquire or release reads, if a short path read them (below)
local function mload(pre)
  MKEY = KM
  if OP == 'acquire' then
    local v = pre or redis.call('HMGET', KM, unpack(MF_ACQUIRE))
    if not v[1] then
      return nil
    end
    local cap, avail, held, fence, nq = v[1] + 0, v[2] + 0, v[3] + 0, v[4] + 0, v[5] + 0
    local due = v[6] and v[6] + 0 or 0
    local nt = v[7] and v[7] + 0 or 0
    MFS = MF_ACQUIRE
    MOLD = {cap, avail, held, fence, nq, v[6] and due or -1, v[7] and nt or -1}
    return setmetatable({cap = cap, avail = avail, held = held, fence = fence, nq = nq,
                         due = due, nt = nt}, MREST)
  elseif OP == 'lease_release' then
    local v = pre or redis.call('HMGET', KM, unpack(MF_RELEASE))
    if not v[1] then
      return nil
    end
    local avail, held, nq = v[1] + 0, v[2] + 0, v[3] + 0
    local due = v[4] and v[4] + 0 or 0
    local nt = v[5] and v[5] + 0 or 0
    MFS = MF_RELEASE
    MOLD = {avail, held, nq, v[4] and due or -1, v[5] and nt or -1}
    return setmetatable({avail = avail, held = held, nq = nq, due = due, nt = nt}, MREST)
  end
  local v = redis.call('HMGET', KM, unpack(MF))
  if not v[1] then
    return nil
  end
  local m, old = {}, {}
  for i = 1, #MF do
    local x = tonumber(v[i] or '0')
    m[MF[i]] = x
    old[i] = v[i] and x or -1
  end
  MFS, MOLD = MF, old
  return m
end
local function msave()
  local a, n, fs, old = {}, 0, MFS, MOLD
  for i = 1, #fs do
    local f = fs[i]
    local v = M[f] -- (every field of MFS is set: no metamethod)
    if not old or old[i] ~= v then
      a[n + 1] = f
      a[n + 2] = N(v)
      n = n + 2
    end
  end
  if n > 0 then
    redis.call('HSET', KM, unpack(a))
  end
  MOLD = nil
end
-- A new row goes on from the fence its name handed out last (kept after a delete).
local function mnew(cap, legacy)
  MFS, MOLD = MF, nil
  return {cap = cap, avail = cap, held = 0, fence = tonumber(redis.call('GET', KF) or '0'),
          legacy = legacy, created = NOW, seq = 0, nq = 0, wq = 0, due = 0, nt = 0}
end
local function due_at(t)
  if M.due == 0 or t < M.due then
    M.due = t
  end
end

-- A fence: strictly above every fence this name handed out, and never below Redis's clock in
-- microseconds, so a counter that lost its last increments (a failover, a restart from an
-- older file) still moves forward.
-- The row holds the counter; :f keeps it once the row is gone (delete, a lock key's end).
local function next_fence()
  local f = M.fence + 1
  local us = nowus()
  if f < us then
    f = us
  end
  M.fence = f
  return f
end

-- Leases granted, by stem: what the list shows as `grants`, a counter for rates. Kept in the
-- library's Lua state, not in Redis, so a grant writes nothing more: it starts over when the
-- library is loaded again (an instance's connect) or Redis restarts, and when it names more
-- than GRANTS_MAX semaphores (a counter going down is a counter that started over).
local GRANTS, NGRANTS, GRANTS_MAX = {}, 0, 100000
local function granted()
  local n = GRANTS[S]
  if not n then
    if NGRANTS >= GRANTS_MAX then
      GRANTS, NGRANTS = {}, 0
    end
    NGRANTS = NGRANTS + 1
    n = 0
  end
  GRANTS[S] = n + 1
end

-- ---- leases ----
local ENDED = {released = 'R', expired = 'E', revoked = 'V', deleted = 'D'}

-- l: the lease when the caller has read it already
local function lease_end(lid, why, l)
  l = l or lget(lid)
  if not l then
    return nil
  end
  if l.old then
    redis.call('HDEL', KL, lid)
  end
  redis.call('ZREM', KX, lid)
  local tomb = 'T' .. ENDED[why]
  if OP == 'lease_release' and lid == LID then
    tomb = tomb .. RID -- a retry of this very release finds it done (see main)
  end
  redis.call('SET', 'sema:id:' .. lid, tomb, 'PX', TOMB_TTL_MS)
  if l.idem ~= '' and redis.call('HGET', KI, l.idem) == 'L' .. lid then
    redis.call('HDEL', KI, l.idem)
  end
  M.avail = M.avail + l.w
  M.held = M.held - l.w
  count('leases', '-1')
  if M.nt > 0 then
    est_hold(NOW - l.acq)
    tk_lease_gone(lid, why)
  end
  if why ~= 'deleted' then
    act(why, '', '', lid, l)
  end
  return l
end

local SAFE_AT = 0
local GRANTED -- waiter id -> lease id, granted in this call (kept for collect and cancel)

local function grant(w, lid, wid)
  local l = {w = w.w, f = next_fence(), ttl = w.ttl, acq = NOW, exp = NOW + w.ttl,
             owner = w.owner, idem = w.idem, mode = w.mode, princ = w.princ, sw = w.sw,
             sttl = w.sttl, sacq = nows()}
  lwrite(lid, l)
  redis.call('ZADD', KX, l.sexp, lid)
  bump_horizon(l.exp)
  due_at(l.exp)
  if w.idem ~= '' then
    redis.call('HSET', KI, w.idem, 'L' .. lid)
  end
  M.avail = M.avail - l.w
  M.held = M.held + l.w
  granted()
  count('leases', '1')
  if OP == 'collect' or OP == 'cancel' then -- (the ops that look at it)
    if GRANTED == NONE then
      GRANTED = {}
    end
    GRANTED[wid] = lid
  end
  outcome('granted', wid, w, lid, l)
  return l
end

-- ---- the queue ----
local function unqueue(wid, w)
  if M.nt > 0 then
    fw_left(wid, w.w)
  end
  redis.call('ZREM', KQ, wid)
  redis.call('HDEL', KW, wid)
  M.nq = M.nq - 1
  M.wq = M.wq - w.w
  if w.idem ~= '' and redis.call('HGET', KI, w.idem) == 'W' .. wid then
    redis.call('HDEL', KI, w.idem)
  end
end

local MORE = false -- housekeeping stopped at its bound: come back at once

-- Strict FIFO with head-of-line blocking: grant heads while they fit.
local function admit()
  if M.nq == 0 then
    return -- nobody waits: no look at the queue
  end
  local n = 0
  while n < HK_MAX do
    local h = redis.call('ZRANGE', KQ, '0', '0')
    if #h == 0 then
      return
    end
    local wid = h[1]
    local rec = redis.call('HGET', KW, wid)
    if not rec then
      redis.call('ZREM', KQ, wid)
    else
      local w = wunpack(rec)
      if w.kind == 'i' then
        if M.avail < M.cap then
          return
        end
        unqueue(wid, w)
        outcome('idle', wid, w, '', nil, '')
      else
        if w.w > M.avail or NOW < SAFE_AT then
          return
        end
        unqueue(wid, w)
        est_queue_grant(w.w)
        if w.kind == 't' then
          tk_admit(wid)
        else
          grant(w, w.lid, wid)
        end
      end
    end
    n = n + 1
  end
  MORE = true
end

-- An instance stopped renewing its waiters: they leave the queue, and grants made to them
-- that they never collected go back.
local function prune_instance(inst)
  redis.call('HDEL', KA, inst)
  local pfx = inst .. '.'
  for _, wid in ipairs(redis.call('ZRANGE', KQ, '0', '-1')) do
    if string.sub(wid, 1, #pfx) == pfx then
      local rec = redis.call('HGET', KW, wid)
      if rec then
        unqueue(wid, wunpack(rec))
      else
        redis.call('ZREM', KQ, wid)
      end
    end
  end
  local g = redis.call('HGETALL', KG)
  for i = 1, #g, 2 do
    local a = fields(g[i + 1])
    if a[1] == inst then
      redis.call('HDEL', KG, g[i])
      if a[2] == 'granted' and M then
        lease_end(a[3], 'released')
      end
    end
  end
end

local function housekeep_all()
  local due = redis.call('ZRANGEBYSCORE', KX, '-inf', nows(), 'LIMIT', '0', N(HK_MAX))
  for _, lid in ipairs(due) do
    lease_end(lid, 'expired')
  end
  if #due == HK_MAX then
    MORE = true
  end
  local a = redis.call('HGETALL', KA)
  for i = 1, #a, 2 do
    if tonumber(a[i + 1]) < NOW and a[i] ~= INST then
      prune_instance(a[i])
    end
  end
  if M.nt > 0 then
    tk_housekeep()
  end
  admit()
  M.due = -1 -- worked out again when the call ends
end

-- Nothing due yet: no scan (a call that frees units admits the queue's head itself; this
-- one more look costs a command only when someone waits).
local function housekeep()
  if M.due ~= 0 and M.due <= NOW then
    return housekeep_all()
  end
  if M.nq > 0 then
    admit()
  end
end

local function next_due()
  if not S then
    return 0
  end
  if MORE then
    return NOW
  end
  local d = 0
  local x = redis.call('ZRANGE', KX, '0', '0', 'WITHSCORES')
  if #x > 0 then
    d = tonumber(x[2])
  end
  -- instances that may stop renewing: pruned once their alive-until is past, so due the
  -- millisecond after it (those past it are pruned already, or are this one)
  local a = redis.call('HGETALL', KA)
  for i = 2, #a, 2 do
    local v = tonumber(a[i]) + 1
    if v > NOW and (d == 0 or v < d) then
      d = v
    end
  end
  if M and M.nq > 0 and SAFE_AT > NOW and (d == 0 or SAFE_AT < d) then
    d = SAFE_AT
  end
  if M and M.nt > 0 then
    d = tk_next_due(d)
  end
  return d
end

-- A lock key lives while someone holds or awaits it; sema:locks lists the live ones by key
-- (members key NUL stem, as sema:names).
local LOCK_NEW
local function lock_gc()
  if KIND == 'k' and M and M.held == 0 and M.nq == 0 then
    if not LOCK_NEW then
      count('locks', '-1')
      redis.call('ZREM', 'sema:locks', NAME .. '\0' .. S)
    end
    LOCK_NEW = false
    redis.call('DEL', KM, KQ, KW, KL, KX, KI, KA)
    redis.call('SET', KF, N(M.fence), 'PX', TOMB_TTL_MS) -- the clock floor keeps later fences above
    M = nil
    return true
  end
  return false
end

local function save()
  if M and not lock_gc() then
    if LOCK_NEW then
      count('locks', '1')
      redis.call('ZADD', 'sema:locks', '0', NAME .. '\0' .. S)
      LOCK_NEW = false
    end
    msave()
  end
end

-- ---- results ----
local function lease_result(lid, l)
  lstr(l)
  return {lid, l.sw, l.sf, l.sttl, l.sacq, l.sexp, l.owner, l.mode}
end

local function readers()
  if KIND ~= 'k' then
    return 0
  end
  local n = 0
  for _, x in ipairs(lall()) do
    if x[2].mode == '1' then
      n = n + 1
    end
  end
  return n
end

-- cap, avail, held, fence, waiting, waiting weight, legacy, readers, [holders, waiters, truncated]
local function view(lists)
  local r = {N(M.cap), N(M.avail), N(M.held), N(M.fence), N(M.nq), N(M.wq), N(M.legacy),
             N(readers())}
  if not lists then
    return r
  end
  local hs, ws = {}, {}
  -- the holders by fence (grant order)
  local ls = lall()
  table.sort(ls, function(x, y) return x[2].f < y[2].f end)
  for i = 1, math.min(#ls, VIEW_MAX) do
    for _, v in ipairs(lease_result(ls[i][1], ls[i][2])) do
      hs[#hs + 1] = v
    end
  end
  local wids = redis.call('ZRANGE', KQ, 0, VIEW_MAX - 1)
  for _, wid in ipairs(wids) do
    local rec = redis.call('HGET', KW, wid)
    if rec then
      local w = wunpack(rec)
      ws[#ws + 1] = w.owner
      ws[#ws + 1] = N(w.w)
      ws[#ws + 1] = N(w.since)
      ws[#ws + 1] = w.kind == 'i' and '0' or w.mode
      ws[#ws + 1] = w.kind == 'i' and '1' or w.kind == 't' and '2' or '0' -- 2: a ticket
    end
  end
  local trunc = (#ls > VIEW_MAX or M.nq > VIEW_MAX) and '1' or '0'
  r[#r + 1] = hs
  r[#r + 1] = ws
  r[#r + 1] = trunc
  return r
end

local function cat(a, b)
  for _, v in ipairs(b) do
    a[#a + 1] = v
  end
  return a
end

-- Every semaphore with something due (a lease's expiry, a dead instance's waiters, the end
-- of a pause after lost data) is in sema:due by that time; instances arm a timer for the
-- earliest and run `sweep`, so an expiry grants waiters even when no request comes.
-- A row's due time is written to sema:due only when it changed (a row that was not there
-- and is not now, a lock key's short life, has no entry; a sweep rewrites its entry).
local DUE0 -- the row's due time as loaded (-2: no row)

-- The earliest due time of all goes in every reply: every instance arms its sweep timer for
-- it, so a due time filed by an instance that then stops is still swept by the others. It is
-- kept in the epoch's hash (`due`), read with the epoch by every call, and written by the
-- calls that change sema:due (the only writers of sema:due, in the same script: the two
-- cannot disagree), so a call that files nothing reads no sorted set for it.
local DUE_HEAD
local function due_head(changed)
  if changed or not DUE_HEAD then
    local g = redis.call('ZRANGE', 'sema:due', '0', '0', 'WITHSCORES')
    local h = g[2] or '0'
    if h ~= DUE_HEAD then
      DUE_HEAD = h
      redis.call('HSET', 'sema:epoch', 'due', h)
    end
  end
end
local function counts()
  local c = STATS
  return c.sems .. '\0' .. c.leases .. '\0' .. c.locks .. '\0' .. DUE_HEAD .. '\0' .. HORIZON_S
end
local function reply(status, msg, res)
  local d = 0
  if M then
    if M.due < 0 or MORE then
      M.due = next_due() -- the housekeeping ran: work it out again
    end
    d = M.due
    save() -- the row as the housekeeping and the op left it (or gone: a lock key's end)
    if not M then
      d = 0
    end
  end
  if S and ((d ~= DUE0 and not (DUE0 == -2 and d == 0)) or OP == 'sweep') then
    if d > 0 then
      redis.call('ZADD', 'sema:due', N(d), S)
    else
      redis.call('ZREM', 'sema:due', S)
    end
    due_head(true)
  end
  return {status == 0 and '0' or N(status), msg or '', nows(), d == 0 and '0' or N(d),
          concat(ACTS, '\0'), S or '', counts(), unpack(res or NONE)} -- (one table of its size)
end

-- The error codes of include/sema/error.h that the operations answer.
local EINVAL, ENOENT, EEXIST, EBUSY, ETIMEDOUT, ECANCELED = -22, -2, -17, -16, -110, -125
local ESTALE, EEXPIRED, EREVOKED, ELIMIT, EUNAVAIL, EOVERFLOW = -116, -127, -128, -122, -11, -75
local EREPLACED, EKEYMISMATCH, EACCES = -1001, -1002, -13
local M_NOT_FOUND = 'no such semaphore'
local M_LOST = 'Redis lost its state; grants resume once every lease it held has run out'
local TOMB = {R = {ESTALE, 'the lease was already released'},
              E = {EEXPIRED, 'the lease expired'},
              V = {EREVOKED, 'the lease was revoked'},
              D = {ECANCELED, "the lease's semaphore was deleted"}}

-- ---- operations ----
local ops = {}

local function create(legacy)
  local max = tonumber(ARGV[A + 1])
  if max > 0 and redis.call('ZCARD', 'sema:names') >= max then
    return reply(ELIMIT, 'too many semaphores')
  end
  M = mnew(tonumber(ARGV[A]), legacy)
  msave()
  count('sems', '1')
  redis.call('ZADD', 'sema:names', '0', NAME .. '\0' .. S)
  return nil
end

-- put: capacity, max semaphores -> created, view
function ops.put()
  if M then
    if M.cap ~= tonumber(ARGV[A]) then
      return reply(EEXIST, 'the semaphore exists with another capacity')
    end
    return reply(0, '', cat({'0'}, view(true)))
  end
  local r = create(0)
  return r or reply(0, '', cat({'1'}, view(true)))
end

function ops.legacy_create()
  if M then
    return reply(EEXIST, 'the semaphore already exists')
  end
  local r = create(1)
  return r or reply(0, '', cat({'1'}, view(false)))
end

function ops.get()
  return reply(0, '', cat({'0'}, view(true)))
end

function ops.legacy_value()
  return reply(0, '', cat({'0'}, view(false)))
end

function ops.lock_get()
  return reply(0, '', cat({'0'}, view(true)))
end

local function delete_all()
  if M.nt > 0 then
    tk_delete_all()
  end
  for _, wid in ipairs(redis.call('ZRANGE', KQ, '0', '-1')) do
    local rec = redis.call('HGET', KW, wid)
    if rec then
      outcome('fail', wid, wunpack(rec), '', nil, N(ECANCELED))
    end
  end
  for _, lid in ipairs(redis.call('ZRANGE', KX, '0', '-1')) do
    lease_end(lid, 'deleted')
  end
  act('deleted', '', '', '', nil, '')
  redis.call('SET', KF, N(M.fence))
  redis.call('DEL', KM, KQ, KW, KL, KX, KI, KA, KEST)
  redis.call('ZREM', 'sema:names', NAME .. '\0' .. S)
  count('sems', '-1')
  M = nil
end

function ops.delete()
  delete_all()
  return reply(0, '')
end

-- resize: capacity
function ops.resize()
  local cap = tonumber(ARGV[A])
  M.avail = M.avail + cap - M.cap
  M.cap = cap
  for _, wid in ipairs(redis.call('ZRANGE', KQ, '0', '-1')) do
    local rec = redis.call('HGET', KW, wid)
    if rec then
      local w = wunpack(rec)
      if w.kind == 'a' and w.w > cap then
        unqueue(wid, w)
        outcome('fail', wid, w, '', nil, N(EINVAL))
      end
    end
  end
  if M.nt > 0 then
    tk_resize(cap)
  end
  act('resized', '', '', '', nil, N(cap))
  admit()
  return reply(0, '', cat({'0'}, view(true)))
end

function ops.legacy_up()
  if M.avail >= CAP_MAX then
    return reply(EOVERFLOW, 'value would exceed 2^53')
  end
  M.avail = M.avail + 1
  M.legacy = 1
  admit()
  return reply(0, '', cat({'0'}, view(false)))
end

function ops.legacy_down()
  if M.avail < 1 or M.nq > 0 then
    return reply(EBUSY, 'Semaphore locked')
  end
  M.avail = M.avail - 1
  M.legacy = 1
  return reply(0, '', cat({'0'}, view(false)))
end

-- Park a request at the tail of the queue.
local function park(wid, w)
  ALIVE_MS = tonumber(ARGV[5])
  local maxw = tonumber(ARGV[A + 8])
  if maxw > 0 and M.nq >= maxw then
    return reply(ELIMIT, 'too many parked requests')
  end
  M.seq = M.seq + 1
  redis.call('ZADD', KQ, N(M.seq), wid)
  redis.call('HSET', KW, wid, wpack(w))
  redis.call('HSET', KA, INST, N(NOW + ALIVE_MS))
  due_at(NOW + ALIVE_MS + 1)
  M.nq = M.nq + 1
  M.wq = M.wq + w.w
  if w.idem ~= '' then
    redis.call('HSET', KI, w.idem, 'W' .. wid)
  end
  return reply(1, '')
end

local M_KEY_MISMATCH = 'this Idempotency-Key names a request of another weight ' ..
                       '(or lock mode); nothing was granted'
local M_KEY_OTHER_TOKEN = 'the Idempotency-Key names a request of another token'

-- A retry with a known Idempotency-Key: the lease it names, or its place in the queue.
local function idem_retry(wid, w, wait)
  local v = redis.call('HGET', KI, w.idem)
  if not v then
    return nil
  end
  local ref = string.sub(v, 2)
  if string.sub(v, 1, 1) == 'T' then -- a ticket's key
    local t = redis.call('HGET', KT, ref)
    if t and not allowed(fields(t)[8] or '') then
      return reply(EACCES, M_KEY_OTHER_TOKEN)
    end
    return reply(EKEYMISMATCH, 'this Idempotency-Key names a ticket; nothing was granted')
  end
  if string.sub(v, 1, 1) == 'L' then
    local l = lget(ref)
    if not l then
      return nil
    end
    if not allowed(l.princ) then
      return reply(EACCES, M_KEY_OTHER_TOKEN)
    end
    if l.w ~= w.w or l.mode ~= w.mode then
      return reply(EKEYMISMATCH, M_KEY_MISMATCH)
    end
    return reply(0, '', lease_result(ref, l))
  end
  local rec = redis.call('HGET', KW, ref)
  if not rec then
    return nil
  end
  local old = wunpack(rec)
  if not allowed(old.princ) then
    return reply(EACCES, M_KEY_OTHER_TOKEN)
  end
  if old.w ~= w.w or old.kind ~= w.kind or old.mode ~= w.mode then
    return reply(EKEYMISMATCH, M_KEY_MISMATCH)
  end
  if not wait then
    return reply(EBUSY, 'not available without waiting')
  end
  -- the retry takes the first attempt's place: same position, its own instance
  local score = redis.call('ZSCORE', KQ, ref)
  redis.call('ZREM', KQ, ref)
  redis.call('HDEL', KW, ref)
  old.inst = INST
  old.lid = w.lid
  old.ttl, old.sttl = w.ttl, w.sttl
  old.owner = w.owner
  ALIVE_MS = tonumber(ARGV[5])
  redis.call('ZADD', KQ, score, wid)
  redis.call('HSET', KW, wid, wpack(old))
  redis.call('HSET', KA, INST, N(NOW + ALIVE_MS))
  due_at(NOW + ALIVE_MS + 1)
  redis.call('HSET', KI, w.idem, 'W' .. wid)
  outcome('fail', ref, wunpack(rec), '', nil, N(EREPLACED))
  return reply(1, '')
end

-- acquire: weight (or mode for a lock), wait (0 try, 1 wait), ttl, owner, idem, lease id,
-- waiter id, max lock keys, max waiters here, lock readers
local function acquire()
  local wait = ARGV[A + 1] == '1'
  local w = {inst = INST, w = ARGV[A] + 0, kind = 'a', since = NOW,
             ttl = ARGV[A + 2] + 0, owner = ARGV[A + 3], idem = ARGV[A + 4],
             lid = ARGV[A + 5], mode = '0', princ = PRINC, sw = ARGV[A], sttl = ARGV[A + 2]}
  local wid = ARGV[A + 6]
  if KIND == 'k' then
    -- the mode is kept apart from the weight: with one reader allowed both modes weigh 1
    if w.w == 0 then
      w.w, w.mode, w.sw = M.cap, '2', nil
    else
      w.mode = '1'
    end
  end
  if w.w < 1 or w.w > M.cap then
    return reply(EINVAL, 'weight must be between 1 and the capacity')
  end
  if RETRY then
    -- sent again: a grant made at once was not cached (main); its lease tells it
    local t = redis.call('GET', 'sema:id:' .. w.lid)
    local l = lread(w.lid, t)
    if l then
      return reply(0, '', lease_result(w.lid, l))
    end
    if t and string.sub(t, 1, 1) == 'T' then
      local tb = TOMB[string.sub(t, 2, 2)]
      return reply(tb[1], tb[2])
    end
  end
  if w.idem ~= '' then
    local r = idem_retry(wid, w, wait)
    if r then
      return r
    end
  end
  if NOW < SAFE_AT then
    lock_gc()
    return reply(EUNAVAIL, M_LOST)
  end
  if M.nq == 0 and w.w <= M.avail then
    local own = OWN
    local l = grant(w, w.lid, wid)
    OWN = own -- the caller's own grant completes no parked request: a retry rebuilds it
    REBUILT = true
    return reply(0, '', lease_result(w.lid, l))
  end
  if not wait then
    return reply(EBUSY, 'not available without waiting')
  end
  return park(wid, w)
end

function ops.acquire()
  return acquire()
end

function ops.lock_acquire()
  return acquire()
end

-- wait_idle: wait, waiter id (same places as acquire's)
function ops.wait_idle()
  local wait = ARGV[A + 1] == '1'
  if M.nq == 0 and M.avail >= M.cap then
    return reply(0, '', {'idle'})
  end
  if not wait then
    return reply(EBUSY, 'not idle')
  end
  return park(ARGV[A + 6], {inst = INST, w = 0, kind = 'i', since = NOW, ttl = 0, owner = '',
                            idem = '', lid = '', mode = '0', princ = PRINC})
end

-- ---- leases (KEYS[1] is the lease id's key: LID; LEASE its lease, read by run) ----
local LEASE

function ops.lease_get()
  return reply(0, '', lease_result(LID, LEASE))
end

-- renew: ttl
function ops.lease_renew()
  local l = LEASE
  if not allowed(l.princ) then
    return reply(EACCES, M_OTHER_TOKEN)
  end
  l.ttl = tonumber(ARGV[A])
  l.exp = NOW + l.ttl
  l.sttl, l.sexp = nil, nil
  lwrite(LID, l)
  redis.call('ZADD', KX, l.sexp, LID)
  bump_horizon(l.exp)
  due_at(l.exp)
  return reply(0, '', lease_result(LID, l))
end

local function end_op(why)
  REBUILT = why == 'released'
  if not allowed(LEASE.princ) then
    return reply(EACCES, M_OTHER_TOKEN)
  end
  lease_end(LID, why, LEASE)
  if why == 'revoked' then
    next_fence() -- a fenced write with the old token now loses
  end
  admit()
  return reply(0, '')
end

function ops.lease_release()
  return end_op('released')
end

function ops.lease_revoke()
  return end_op('revoked')
end

-- ---- the uncontended acquire and release, in short ----
-- An acquire granted at once, and a release of units nobody waits for, on a semaphore with
-- nothing due and no tickets, whose row has every field they read: what grant() and
-- lease_end() (then admit() and reply(), with nothing to do) do for them, the row and the
-- lease in locals rather than tables, which cost Lua more than their fields. Nil for any
-- other call, which takes the general path, and with it the row's fields if they were read
-- (mload takes them).
-- v: the row's MF_ACQUIRE fields
local function acquire_at_once(v)
  if not v[1] or not v[6] or not v[7] or RETRY or ARGV[A + 4] ~= '' or KIND ~= 's' or
     NOW < SAFE_AT or v[5] + 0 ~= 0 or v[7] + 0 ~= 0 then
    return nil
  end
  local cap, avail, wt, due = v[1] + 0, v[2] + 0, ARGV[A] + 0, v[6] + 0
  if (due ~= 0 and due <= NOW) or wt < 1 or wt > cap or wt > avail then
    return nil
  end
  local fence = v[4] + 1
  if fence < NOWUS then
    fence = NOWUS
  end
  local sw, sttl, owner, lid, wid = ARGV[A], ARGV[A + 2], ARGV[A + 3], ARGV[A + 5], ARGV[A + 6]
  local exp = NOW + sttl
  local sf, sacq, sexp = N(fence), nows(), N(exp)
  lset(lid, sw, sf, sttl, sacq, sexp, owner, '', '0', PRINC)
  redis.call('ZADD', KX, sexp, lid)
  bump_horizon(exp)
  count('leases', '1')
  local savail, sheld = N(avail - wt), N(v[3] + wt)
  if due == 0 or exp < due then
    due = exp
    redis.call('HSET', KM, 'avail', savail, 'held', sheld, 'fence', sf, 'due', sexp)
    redis.call('ZADD', 'sema:due', sexp, S)
    due_head(true)
  else
    redis.call('HSET', KM, 'avail', savail, 'held', sheld, 'fence', sf)
  end
  granted()
  ACTS = {'granted', wid, INST, lid, sw, sf, sttl, sacq, sexp, owner, '0'}
  REBUILT = true
  return {'0', '', sacq, N(due), concat(ACTS, '\0'), S, counts(), lid, sw, sf, sttl, sacq, sexp,
          owner, '0'}
end

-- v: the value of the id's key LID names (neither absent nor a tombstone). Returns the reply,
-- or nil and the row's MF_RELEASE fields if it read them.
local function release_at_once(v)
  local sw, sf, sttl, sacq, sexp, owner, idem, mode, princ, stem = match(v, IDPAT)
  if not sw or not allowed(princ) then
    return nil
  end
  keys_of(stem)
  if KIND ~= 's' then
    return nil
  end
  local m = redis.call('HMGET', KM, 'avail', 'held', 'nq', 'due', 'nt')
  if not m[1] or not m[4] or not m[5] or m[3] + 0 ~= 0 or m[5] + 0 ~= 0 then
    return nil, m
  end
  local due = m[4] + 0
  if due ~= 0 and due <= NOW then
    return nil, m
  end
  local wt = sw + 0
  redis.call('ZREM', KX, LID)
  redis.call('SET', 'sema:id:' .. LID, 'TR' .. RID, 'PX', TOMB_TTL_MS)
  if idem ~= '' and redis.call('HGET', KI, idem) == 'L' .. LID then
    redis.call('HDEL', KI, idem)
  end
  count('leases', '-1')
  redis.call('HSET', KM, 'avail', N(m[1] + wt), 'held', N(m[2] - wt))
  ACTS = {'released', '', '', LID, sw, sf, sttl, sacq, sexp, owner, mode}
  REBUILT = true
  return {'0', '', nows(), due == 0 and '0' or N(due), concat(ACTS, '\0'), S, counts()}
end

-- ---- an instance's own waiters ----

-- collect: waiter ids this instance has parked here (to find those Redis no longer knows).
-- Renews the instance's alive-until, hands over what was granted to it.
function ops.collect()
  local mine = {}
  local n = 0
  for i = A, #ARGV do
    mine[ARGV[i]] = true
    n = n + 1
  end
  if n > 0 and M then
    ALIVE_MS = tonumber(ARGV[5])
    redis.call('HSET', KA, INST, N(NOW + ALIVE_MS))
    due_at(NOW + ALIVE_MS + 1)
  end
  local g = redis.call('HGETALL', KG)
  for i = 1, #g, 2 do
    local a = fields(g[i + 1])
    if a[1] == INST then
      redis.call('HDEL', KG, g[i])
      mine[g[i]] = nil
      local l = a[5] and a[5] ~= '' and {w = tonumber(a[5]), f = tonumber(a[6]),
                 ttl = tonumber(a[7]), acq = tonumber(a[8]), exp = tonumber(a[9]),
                 owner = a[10] or '', idem = a[11] or ''} or nil
      act('c' .. a[2], g[i], INST, a[3], l, a[4])
    end
  end
  for wid, _ in pairs(mine) do
    if not GRANTED[wid] and not (M and redis.call('HEXISTS', KW, wid) == 1) then
      act('gone', wid, INST, '', nil, '')
    end
  end
  return reply(0, '')
end

-- cancel: waiter id, why (t: its timeout, the grant is delivered if it was made; d: its client
-- left, a grant made for it goes back), the lease id it was to get (a grant this instance
-- made for it but never delivered: a reply that came after the client left)
function ops.cancel()
  local wid, why, mylid = ARGV[A], ARGV[A + 1], ARGV[A + 2] or ''
  local ml = why == 'd' and M and mylid ~= '' and redis.call('HEXISTS', KW, wid) == 0 and
             redis.call('HEXISTS', KG, wid) == 0 and lget(mylid)
  if ml then
    lease_end(mylid, 'released', ml)
    admit()
    return reply(0, '')
  end
  local rec = M and redis.call('HGET', KW, wid)
  if rec then
    unqueue(wid, wunpack(rec))
    if why == 't' then
      act('fail', wid, INST, '', nil, N(ETIMEDOUT))
    end
    admit()
  else
    local g = redis.call('HGET', KG, wid)
    local lid = GRANTED[wid]
    if g then
      redis.call('HDEL', KG, wid)
      local a = fields(g)
      if a[2] == 'granted' then
        lid = a[3]
        if why == 't' then
          local l = {w = tonumber(a[5]), f = tonumber(a[6]), ttl = tonumber(a[7]),
                     acq = tonumber(a[8]), exp = tonumber(a[9]), owner = a[10] or '',
                     idem = a[11] or ''}
          act('cgranted', wid, INST, lid, l, a[4])
          lid = nil
        end
      elseif why == 't' then
        act('c' .. a[2], wid, INST, a[3], nil, a[4])
      end
    end
    if lid and why == 'd' and M then
      lease_end(lid, 'released')
      admit()
    elseif not g and not lid and why == 't' and M and mylid ~= '' then
      -- granted by a script whose answer told it to this instance, which has not seen it yet
      local l = lget(mylid)
      if l then
        act('cgranted', wid, INST, mylid, l, nil)
      end
    end
  end
  return reply(0, '')
end

-- release_lid: a grant this instance could not deliver (its client left): lease id
function ops.drop_lease()
  local l = M and lget(ARGV[A])
  if l then
    lease_end(ARGV[A], 'released', l)
    admit()
  end
  return reply(0, '')
end

-- ---- tickets ----
-- A ticket is a waiter of kind 't' in the queue (:q, :w, its waiter id is the ticket id) that
-- no instance holds: its record is in :t, and while it waits (or its grant is not collected)
-- its keepalive deadline is in :k, which the housekeeping sweeps like lease expiries (the
-- row's due time includes it). A grant makes the lease at once (:tl maps it back to the
-- ticket); reading the ticket collects it. `sema:tk:ID` names the ticket's semaphore ('W' and
-- the stem), then, once it ended, why ('X' and a reason letter) for TOMB_TTL_MS. Every change
-- of a ticket's status is published on sema:tkt (its id), so an instance with a long-poll or a
-- stream on it reads it again at once; positions are read again every poll interval.
local EGONE = -1004
local TK_ENDED = {
  L = 'the ticket left the line',
  A = 'the ticket was dropped: nobody read it for keepalive_ms',
  U = "the ticket's lease was released: nobody collected it within keepalive_ms",
  D = "the ticket's lease has ended",
  X = "the ticket's semaphore was deleted",
  F = 'the ticket can no longer be granted (its weight is above the capacity now, or memory ' ..
      'ran out)'}
local EST_MIN = 8

-- status ('w' waiting, 'g' granted), weight, ttl, keepalive, owner, idempotency key, lease id,
-- principal, collected ('0', '1'), its place in the queue, the weight ahead then, the weight
-- that had left from places before it then (below)
local function tkpack(t)
  return table.concat({t.st, N(t.w), N(t.ttl), N(t.ka), t.owner, t.idem, t.lid, t.princ,
                       t.coll, N(t.seq), N(t.bw), N(t.bf)}, '\0')
end
local function tkunpack(s)
  local a = fields(s)
  return {st = a[1], w = tonumber(a[2]), ttl = tonumber(a[3]), ka = tonumber(a[4]),
          owner = a[5] or '', idem = a[6] or '', lid = a[7] or '', princ = a[8] or '',
          coll = a[9] or '0', seq = tonumber(a[10] or '0'), bw = tonumber(a[11] or '0'),
          bf = tonumber(a[12] or '0')}
end
local function tk_get(tid)
  local rec = redis.call('HGET', KT, tid)
  return rec and tkunpack(rec) or nil
end
local function tk_changed(tid)
  redis.call('PUBLISH', 'sema:tkt', tid)
end

-- The ticket's record goes, a tombstone says why (the caller ends its lease or its place).
local function tk_forget(tid, t, why)
  redis.call('HDEL', KT, tid)
  redis.call('ZREM', KK, tid)
  M.nt = M.nt - 1
  if M.nt == 0 then
    redis.call('DEL', KFW) -- kept only while there are tickets
    if redis.call('EXISTS', KEST) == 1 then
      redis.call('HSET', KEST, 'el', '0') -- no gap measured across a time without tickets
    end
  end
  count('tickets', -1)
  if t.idem ~= '' and redis.call('HGET', KI, t.idem) == 'T' .. tid then
    redis.call('HDEL', KI, t.idem)
  end
  redis.call('SET', 'sema:tk:' .. tid, 'X' .. why, 'PX', TOMB_TTL_MS)
  tk_changed(tid)
end

-- Its lease ended (released, expired, revoked; its semaphore deleted): so did the ticket.
tk_lease_gone = function(lid, why)
  local tid = redis.call('HGET', KTL, lid)
  if not tid then
    return
  end
  redis.call('HDEL', KTL, lid)
  local t = tk_get(tid)
  if t then
    tk_forget(tid, t, why == 'deleted' and 'X' or 'D')
  end
end

-- End a ticket: out of line, or its lease released. The caller admits the queue.
local function tk_end(tid, t, why)
  if t.st == 'w' then
    local rec = redis.call('HGET', KW, tid)
    if rec then
      unqueue(tid, wunpack(rec))
    end
    tk_forget(tid, t, why)
  else
    redis.call('HDEL', KTL, t.lid)
    tk_forget(tid, t, why)
    lease_end(t.lid, 'released')
  end
end

local function keepalive(tid, t)
  local due = NOW + t.ka
  redis.call('ZADD', KK, N(due), tid)
  due_at(due)
end

-- Its turn: the lease is made now, and whoever holds the ticket has keepalive_ms to read it.
local function tk_grant(tid, t)
  local l = {w = t.w, f = next_fence(), ttl = t.ttl, acq = NOW, exp = NOW + t.ttl,
             owner = t.owner, idem = '', mode = '0', princ = t.princ}
  lwrite(t.lid, l)
  redis.call('ZADD', KX, l.sexp, t.lid)
  redis.call('HSET', KTL, t.lid, tid)
  bump_horizon(l.exp)
  due_at(l.exp)
  M.avail = M.avail - l.w
  M.held = M.held + l.w
  granted()
  count('leases', 1)
  count('t_granted', 1)
  t.st, t.coll = 'g', '0'
  redis.call('HSET', KT, tid, tkpack(t))
  keepalive(tid, t)
  act('granted', '', '', t.lid, l)
  tk_changed(tid)
end

tk_admit = function(tid)
  local t = tk_get(tid)
  if t then
    tk_grant(tid, t)
  end
end

-- Keepalives that ran out: a waiting ticket leaves the line, an uncollected grant goes back.
tk_housekeep = function()
  local due = redis.call('ZRANGEBYSCORE', KK, '-inf', N(NOW), 'LIMIT', 0, HK_MAX)
  for _, tid in ipairs(due) do
    local t = tk_get(tid)
    if not t then
      redis.call('ZREM', KK, tid)
    elseif t.st == 'w' then
      count('t_abandoned', 1)
      tk_end(tid, t, 'A')
    else
      count('t_uncollected', 1)
      tk_end(tid, t, 'U')
    end
  end
  if #due == HK_MAX then
    MORE = true
  end
end

tk_next_due = function(d)
  local x = redis.call('ZRANGE', KK, 0, 0, 'WITHSCORES')
  if #x > 0 then
    local v = tonumber(x[2])
    if v <= NOW then
      v = NOW
    end
    if d == 0 or v < d then
      d = v
    end
  end
  return d
end

tk_delete_all = function()
  local all = redis.call('HGETALL', KT)
  for i = 1, #all, 2 do
    local t = tkunpack(all[i + 1])
    if t.st == 'w' then
      redis.call('ZREM', KQ, all[i])
      redis.call('HDEL', KW, all[i])
      M.nq = M.nq - 1
      M.wq = M.wq - t.w
    end
    count('tickets', -1)
    redis.call('SET', 'sema:tk:' .. all[i], 'XX', 'PX', TOMB_TTL_MS)
    tk_changed(all[i])
  end
  redis.call('DEL', KT, KK, KTL, KFW)
  M.nt = 0
end

-- Waiting tickets heavier than the new capacity can never be granted: they end.
tk_resize = function(cap)
  local all = redis.call('HGETALL', KT)
  for i = 1, #all, 2 do
    local t = tkunpack(all[i + 1])
    if t.st == 'w' and t.w > cap then
      tk_end(all[i], t, 'F')
    end
  end
end

-- ---- the wait estimate: what the semaphore measured, as the embedded back end does ----
-- Moving mean (and variance) of the time between grants from the queue per unit granted
-- (only while the queue stays non-empty), and of hold times, in :e (us, us^2; el: the last
-- grant's time in us, 0 when the queue emptied). Sampled while the semaphore has tickets, so
-- a semaphore without them pays nothing for it.
local EST_ALPHA = 0.1
local EST_F = {'en', 'eg', 'ev', 'el', 'ehn', 'eh'}
local function ewma(mean, var, x, n)
  if n == 0 then
    return x, 0
  end
  local d = x - mean
  return mean + EST_ALPHA * d, (1 - EST_ALPHA) * (var + EST_ALPHA * d * d)
end
local function est_load()
  local v = redis.call('HMGET', KEST, unpack(EST_F))
  local e = {}
  for i, f in ipairs(EST_F) do
    e[f] = tonumber(v[i] or '0')
  end
  return e
end

est_queue_grant = function(w)
  if M.nt == 0 then
    return
  end
  local e = est_load()
  if e.el ~= 0 and w > 0 then
    local g, v = ewma(e.eg, e.ev, (nowus() - e.el) / w, e.en)
    redis.call('HSET', KEST, 'eg', N(math.floor(g + 0.5)), 'ev', N(math.floor(v + 0.5)), 'en',
               N(e.en + 1))
  end
  redis.call('HSET', KEST, 'el', M.nq > 0 and N(nowus()) or '0')
end

est_hold = function(ms)
  if M.nt == 0 then
    return
  end
  local e = est_load()
  if ms < 0 then
    ms = 0
  end
  redis.call('HSET', KEST, 'eh', N(math.floor(ewma(e.eh, 0, ms * 1000, e.ehn) + 0.5)), 'ehn',
             N(e.ehn + 1))
end

-- The wait until `units` more units have been granted from the queue: p50 and p90 of a
-- log-normal with the summed gaps' mean and variance; nil without enough samples.
local function estimate(units)
  local e = est_load()
  local m, var
  if e.en >= EST_MIN then
    m, var = e.eg / 1000, e.ev / 1e6
  elseif e.ehn >= EST_MIN then
    m = e.eh / 1000 / M.cap
    var = m * m
  else
    return nil
  end
  local mean = units * m
  if e.ehn >= EST_MIN and M.held > 0 then
    -- the oldest holder (the lowest fence) frees no unit before its expected rest
    local acq, f
    for _, x in ipairs(lall()) do
      local l = x[2]
      if not f or l.f < f then
        f, acq = l.f, l.acq
      end
    end
    if acq then
      local hold, age = e.eh / 1000, NOW - acq
      local first = hold > age and hold - age or 0
      if first + (units - 1) * m > mean then
        mean = first + (units - 1) * m
      end
    end
  end
  if mean <= 0 then
    return 0, 0
  end
  local cv2 = units * var / (mean * mean)
  local sigma = math.sqrt(math.log(1 + cv2))
  local median = mean / math.sqrt(1 + cv2)
  return math.floor(median + 0.5), math.floor(median * math.exp(1.2816 * sigma) + 0.5)
end

-- ---- the weight ahead of a ticket, exact in O(log n) ----
-- A ticket keeps, from when it joined the queue's tail, the weight then in the queue (all of
-- it ahead: bw) and how much weight had left the queue from places before its own by then
-- (bf). Waiters only leave from ahead, never join there, so the weight ahead now is bw less
-- what left from places before its own since: a Fenwick tree over queue places (the :q
-- score) of the weight that left, kept in :fw only while the semaphore has tickets. Its size
-- (field n, a power of two) doubles as places grow; the new root then covers the old one.
-- Places at or below the offset (field o) are folded into one sum (field c): nothing leaves
-- from them again and no ticket asks about them, as they are all behind the queue's head. When
-- a place outgrows the tree and places behind the head are still in it, the tree is built again
-- from the head on (fw_fold), so that a queue that never runs out of tickets keeps a tree the
-- size of its span, not one field for every place it ever had.
do -- (the tree's helpers are locals of this block: the chunk's locals are bounded)
  local function lowbit(j)
    local p = 1
    while j % (p * 2) == 0 do
      p = p * 2
    end
    return p
  end

  -- The tree's size, offset and folded sum.
  local function fw_head()
    local v = redis.call('HMGET', KFW, 'n', 'o', 'c')
    return tonumber(v[1] or '0'), tonumber(v[2] or '0'), tonumber(v[3] or '0')
  end

  fw_prefix = function(i)
    local n, o, c = fw_head()
    i = i - o
    if i > n then
      i = n -- nothing left from a place beyond n
    end
    local idx = {}
    while i > 0 do
      idx[#idx + 1] = N(i)
      i = i - lowbit(i)
    end
    local sum = c
    if #idx > 0 then
      for _, v in ipairs(redis.call('HMGET', KFW, unpack(idx))) do
        sum = sum + tonumber(v or '0')
      end
    end
    return sum
  end

  -- The tree of size n again with offset o2 (> o, at most the head's place less one): each
  -- place's own weight back from the tree (in O(n), the reverse of its build), those at or
  -- below o2 added to the folded sum, the others built into a tree of size n2. Written in
  -- chunks: a call's arguments are bounded.
  local function fw_fold(n, o, c, o2, n2)
    local t = {}
    local all = redis.call('HGETALL', KFW)
    for k = 1, #all, 2 do
      local j = tonumber(all[k])
      if j then
        t[j] = tonumber(all[k + 1])
      end
    end
    for j = n, 1, -1 do
      local up = j + lowbit(j)
      if t[j] and up <= n then
        t[up] = (t[up] or 0) - t[j]
      end
    end
    local shift, u = o2 - o, {}
    for j = 1, n do
      local v = t[j]
      if v and v ~= 0 then
        if j <= shift then
          c = c + v
        elseif j - shift <= n2 then
          u[j - shift] = v
        end
      end
    end
    for j = 1, n2 do
      local up = j + lowbit(j)
      if u[j] and up <= n2 then
        u[up] = (u[up] or 0) + u[j]
      end
    end
    redis.call('DEL', KFW)
    local a = {'n', N(n2), 'o', N(o2), 'c', N(c)}
    for j = 1, n2 do
      if u[j] and u[j] ~= 0 then
        a[#a + 1], a[#a + 2] = N(j), N(u[j])
        if #a >= 1000 then
          redis.call('HSET', KFW, unpack(a))
          a = {}
        end
      end
    end
    if #a > 0 then
      redis.call('HSET', KFW, unpack(a))
    end
    return n2, o2
  end

  fw_left = function(wid, w)
    if w <= 0 then
      return
    end
    local i = tonumber(redis.call('ZSCORE', KQ, wid) or '0')
    if i <= 0 then
      return
    end
    local n, o, c = fw_head()
    if i - o > n then
      local head = redis.call('ZRANGE', KQ, 0, 0, 'WITHSCORES')
      local h = tonumber(head[2] or N(i))
      if h - 1 > o then
        -- room for twice the span from the head: the next fold is as many places away
        local n2 = 1
        while n2 < 2 * (M.seq - h + 1) do
          n2 = n2 * 2
        end
        n, o = fw_fold(n, o, c, h - 1, n2)
      end
    end
    i = i - o
    if n < i then
      if n == 0 then
        n = 1
      end
      while n < i do
        local root = redis.call('HGET', KFW, N(n))
        n = n * 2
        if root then
          redis.call('HSET', KFW, N(n), root)
        end
      end
      redis.call('HSET', KFW, 'n', N(n))
    end
    while i <= n do
      redis.call('HINCRBY', KFW, N(i), w)
      i = i + lowbit(i)
    end
  end
end

-- created, id, status (1 waiting, 2 granted), weight, position, ahead weight, estimated,
-- p50, p90, keepalive, [the lease's 8 fields]
local function tk_view(tid, t, created)
  local pos, ahead, est, p50, p90 = 0, 0, '0', 0, 0
  local lease
  if t.st == 'w' then
    pos = tonumber(redis.call('ZRANK', KQ, tid) or 0) + 1
    ahead = t.bw - (fw_prefix(t.seq - 1) - t.bf)
    local avail = M.avail > 0 and M.avail or 0
    local need = ahead + t.w
    need = need > avail and need - avail or 1
    local a, b = estimate(need)
    if a then
      est, p50, p90 = '1', a, b
    end
  else
    local l = lget(t.lid)
    lease = l and lease_result(t.lid, l) or nil
  end
  local r = {created and '1' or '0', tid, t.st == 'w' and '1' or '2', N(t.w), N(pos), N(ahead),
             est, N(p50), N(p90), N(t.ka)}
  if lease then
    cat(r, lease)
  end
  return r
end

-- A read keeps a waiting ticket in line; one that shows the grant collects it.
local function tk_touch(tid, t)
  if t.st == 'w' then
    keepalive(tid, t)
  elseif t.coll ~= '1' then
    t.coll = '1'
    redis.call('HSET', KT, tid, tkpack(t))
    redis.call('ZREM', KK, tid)
  end
end

local M_TK_OTHER_TOKEN = 'the ticket belongs to another token'
local M_TK_KEY = 'this Idempotency-Key names another request (or a ticket of another weight)'

-- ticket_create: weight, ttl, owner, idempotency key, ticket id, lease id, keepalive,
-- max waiters here
function ops.ticket_create()
  local t = {st = 'w', w = tonumber(ARGV[A]), ttl = tonumber(ARGV[A + 1]), owner = ARGV[A + 2],
             idem = ARGV[A + 3], lid = ARGV[A + 5], ka = tonumber(ARGV[A + 6]), princ = PRINC,
             coll = '0', seq = 0, bw = 0, bf = 0}
  local tid = ARGV[A + 4]
  if KIND ~= 's' then
    return reply(ENOENT, M_NOT_FOUND)
  end
  if t.w < 1 or t.w > M.cap then
    return reply(EINVAL, 'weight must be between 1 and the capacity')
  end
  if t.idem ~= '' then
    local v = redis.call('HGET', KI, t.idem)
    if v then
      local kind, ref = string.sub(v, 1, 1), string.sub(v, 2)
      local old = kind == 'T' and tk_get(ref)
      local other = kind == 'L' and lget(ref) or kind == 'W' and redis.call('HGET', KW, ref)
      if (old and not allowed(old.princ)) or
         (other and not allowed(kind == 'L' and other.princ or wunpack(other).princ)) then
        return reply(EACCES, M_KEY_OTHER_TOKEN)
      end
      if not old or old.w ~= t.w then
        return reply(EKEYMISMATCH, M_TK_KEY)
      end
      tid = string.sub(v, 2)
      tk_touch(tid, old)
      return reply(0, '', tk_view(tid, old, false))
    end
  end
  if NOW < SAFE_AT then
    return reply(EUNAVAIL, M_LOST)
  end
  local now_grant = M.nq == 0 and t.w <= M.avail
  local maxw = tonumber(ARGV[A + 7])
  if not now_grant and maxw > 0 and M.nq >= maxw then
    return reply(ELIMIT, 'too many parked requests')
  end
  M.nt = M.nt + 1
  count('tickets', 1)
  count('t_created', 1)
  redis.call('SET', 'sema:tk:' .. tid, 'W' .. S)
  if t.idem ~= '' then
    redis.call('HSET', KI, t.idem, 'T' .. tid)
  end
  if now_grant then
    tk_grant(tid, t)
    tk_touch(tid, t)
  else
    M.seq = M.seq + 1
    t.seq, t.bw, t.bf = M.seq, M.wq, fw_prefix(M.seq - 1)
    redis.call('ZADD', KQ, N(M.seq), tid)
    redis.call('HSET', KW, tid, wpack({inst = '', w = t.w, kind = 't', since = NOW, ttl = t.ttl,
                                       owner = t.owner, idem = '', lid = t.lid, mode = '0',
                                       princ = t.princ}))
    M.nq = M.nq + 1
    M.wq = M.wq + t.w
    redis.call('HSET', KT, tid, tkpack(t))
    keepalive(tid, t)
  end
  return reply(0, '', tk_view(tid, t, true))
end

local TK_TID, TK
function ops.ticket_get()
  tk_touch(TK_TID, TK)
  return reply(0, '', tk_view(TK_TID, TK, false))
end

function ops.ticket_delete()
  count('t_left', 1)
  tk_end(TK_TID, TK, 'L')
  admit()
  return reply(0, '')
end

-- KEYS[1] is sema:tk:ID: its semaphore is housekept first (the ticket may end in it).
tk_run = function(k)
  TK_TID = string.sub(k, 9)
  local v = redis.call('GET', k)
  if v and string.sub(v, 1, 1) == 'W' then
    keys_of(string.sub(v, 2))
    M = mload()
    if M then
      DUE0 = M.due
      housekeep()
      TK = tk_get(TK_TID)
      if TK then
        if not allowed(TK.princ) then
          return reply(EACCES, M_TK_OTHER_TOKEN)
        end
        return ops[OP]()
      end
      v = redis.call('GET', k)
    else
      v = 'XX'
    end
  end
  if v and string.sub(v, 1, 1) == 'X' then
    return reply(EGONE, TK_ENDED[string.sub(v, 2, 2)] or TK_ENDED.D)
  end
  return reply(ENOENT, 'no such ticket')
end

-- ---- the name index ----

-- A list item's counts beyond its view: leases granted, tickets waiting (live tickets but
-- those granted, which :tl maps from their leases), and when the head of the queue came.
local function list_counts(items)
  local tw, since = 0, 0
  if M.nt > 0 then
    tw = M.nt - redis.call('HLEN', KTL)
  end
  if M.nq > 0 then
    local head = redis.call('ZRANGE', KQ, 0, 0)[1]
    local rec = head and redis.call('HGET', KW, head)
    since = rec and wunpack(rec).since or 0
  end
  items[#items + 1] = N(GRANTS[S] or 0)
  items[#items + 1] = N(tw)
  items[#items + 1] = N(since)
end

-- list, lock_list: prefix, cursor, limit. The index's members (sema:names, sema:locks) are
-- name NUL stem, in name order.
local function list_index(index)
  local pfx, cur, limit = ARGV[A], ARGV[A + 1], tonumber(ARGV[A + 2])
  local start = '[' .. pfx
  if cur ~= '' and cur >= pfx then
    start = '[' .. cur .. '\1'
  end
  local names = redis.call('ZRANGEBYLEX', index, start, '+', 'LIMIT', 0, limit + 1)
  local items, more, n = {}, '0', 0
  for _, m in ipairs(names) do
    local name, stem = string.match(m, '^(.*)%z(sema:.*)$')
    if not name or string.sub(name, 1, #pfx) ~= pfx then
      break
    end
    if n == limit then
      more = '1'
      break
    end
    keys_of(stem)
    M = mload()
    if M then
      items[#items + 1] = name
      cat(items, view(false))
      list_counts(items)
      n = n + 1
    end
  end
  S, M = nil, nil
  return reply(0, '', {more, items})
end
function ops.list()
  return list_index('sema:names')
end
function ops.lock_list()
  return list_index('sema:locks')
end

-- ---- dispatch ----
local TICKET_KEY_OPS = {ticket_get = true, ticket_delete = true} -- KEYS[1]: sema:tk:<id>
local LEASE_OPS = {lease_get = true, lease_renew = true, lease_release = true,
                   lease_revoke = true} -- KEYS[1] is sema:id:LID
local function run()
  local ep = redis.call('HMGET', 'sema:epoch', 'id', 'safe_at', 'horizon', 'due', 'sems',
                       'leases', 'locks')
  if OP == 'hello' then
    -- ARGV: a new epoch id, the id this instance knew ('' at its start), max ttl, the
    -- latest lease expiry it heard of (0: none)
    local known, maxttl, horizon = ARGV[A + 1], tonumber(ARGV[A + 2]), tonumber(ARGV[A + 3])
    local until_ms = NOW + maxttl
    if horizon > 0 and horizon < until_ms then
      until_ms = horizon
    end
    if not ep[1] then
      local safe = 0
      if known ~= '' then
        safe = until_ms -- the data went away under a running instance
      end
      redis.call('HSET', 'sema:epoch', 'id', ARGV[A], 'safe_at', N(safe))
      return {ARGV[A], N(safe), N(NOW)}
    end
    if not ep[5] and redis.call('EXISTS', 'sema:stats') == 1 then
      -- the counts and the horizon of an earlier version, kept apart then: moved in
      local st = redis.call('HMGET', 'sema:stats', 'sems', 'leases', 'locks', 'horizon')
      redis.call('HSET', 'sema:epoch', 'sems', st[1] or '0', 'leases', st[2] or '0', 'locks',
                 st[3] or '0', 'horizon', st[4] or '0')
      redis.call('DEL', 'sema:stats')
    end
    local safe = tonumber(ep[2] or '0')
    if known ~= '' and known ~= ep[1] and safe < until_ms then
      safe = until_ms
      redis.call('HSET', 'sema:epoch', 'safe_at', N(safe))
    end
    return {ep[1], N(safe), N(NOW)}
  end
  if ep[1] ~= EPOCH then
    return {'E', ep[1] or ''}
  end
  local sa = ep[2]
  SAFE_AT = (not sa or sa == '0') and 0 or sa + 0
  HORIZON_S = ep[3] or '0'
  HORIZON = nil -- a number when a grant needs it
  DUE_HEAD = ep[4]
  STATS.sems, STATS.leases, STATS.locks = ep[5] or '0', ep[6] or '0', ep[7] or '0'
  if not DUE_HEAD then
    due_head(false) -- an epoch written before it kept the due time: read it once
  end
  if OP == 'list' or OP == 'lock_list' then
    return ops[OP]()
  end
  if OP == 'sweep' then
    local x = redis.call('ZRANGE', 'sema:due', '0', '0', 'WITHSCORES')
    if #x == 0 or tonumber(x[2]) > NOW then
      return reply(0, '')
    end
    keys_of(x[1])
    M = mload()
    if M then
      DUE0 = M.due
      housekeep_all() -- something is due: the sweep is there for it
    end
    return reply(0, '')
  end
  local k = KEYS[1]
  if TICKET_KEY_OPS[OP] then
    return tk_run(k)
  end
  if LEASE_OPS[OP] then
    LID = string.sub(k, 9)
    local v = redis.call('GET', k)
    if not v then
      return reply(ENOENT, 'no such lease')
    end
    if string.sub(v, 1, 1) == 'T' then
      if RETRY and RID ~= '' and v == 'TR' .. RID then
        return reply(0, '') -- this release, sent again: it was done
      end
      local tb = TOMB[string.sub(v, 2, 2)]
      return reply(tb[1], tb[2])
    end
    local pre
    if OP == 'lease_release' then
      local r
      r, pre = release_at_once(v)
      if r then
        return r
      end
    end
    local l, stem = lparse(v)
    if not stem then
      return reply(ENOENT, 'no such lease')
    end
    keys_of(stem)
    M = mload(pre)
    if not M then
      return reply(ENOENT, 'no such lease')
    end
    DUE0 = M.due
    housekeep()
    if M.due < 0 then
      -- the housekeeping ran: the lease may have ended in it
      v = redis.call('GET', k)
      l = lread(LID, v)
      if not l then
        local tb = TOMB[string.sub(v or 'TE', 2, 2)] or TOMB.E
        return reply(tb[1], tb[2])
      end
    elseif not l then
      l = lread(LID, v) -- an earlier version's lease: its record is in :l
      if not l then
        return reply(ENOENT, 'no such lease')
      end
    end
    LEASE = l
    return ops[OP]()
  end
  keys_of(k)
  local pre
  if OP == 'acquire' then
    pre = redis.call('HMGET', KM, 'cap', 'avail', 'held', 'fence', 'nq', 'due', 'nt')
    local r = acquire_at_once(pre)
    if r then
      return r
    end
  end
  M = mload(pre)
  DUE0 = M and M.due or -2
  if not M then
    if OP == 'lock_acquire' then
      local max = tonumber(ARGV[A + 7])
      if max > 0 and locks_now() >= max then
        return reply(ELIMIT, 'too many lock keys')
      end
      M = mnew(tonumber(ARGV[A + 9]), 0)
      LOCK_NEW = true
    elseif OP == 'put' or OP == 'legacy_create' or OP == 'collect' or OP == 'cancel' or
           OP == 'drop_lease' then
      return ops[OP]()
    elseif OP == 'lock_get' then
      return reply(ENOENT, 'no such lock key (not held or awaited)')
    else
      return reply(ENOENT, M_NOT_FOUND)
    end
  end
  housekeep()
  return ops[OP]()
end

-- The event log. While an instance follows a semaphore's events (its marker :s exists, with
-- the field `log` = "<uid>-<seq>": the log's run and its last event), every public event gets
-- the id <uid>-<seq+1>, ... and is kept in the stream :e under that id (at least the last
-- LOG_MAX_S; the stream lives as long as the marker, which instances renew), and published
-- with its id on sema:ev:<stem>. Ids therefore mean the same on every instance. Without a
-- marker nothing is written (one HGET). A marker that comes back (it expired: no instance
-- renewed it; Redis lost it) starts a new run with a new uid, so an id from before never
-- resumes across the gap. A delete ends the run: a new semaphore of the name starts a new one.
local LOG_MAX_S = '1000' -- (a string: Redis formats a Lua number passed to a command)
local LOG_TTL_S = '6000' -- ms, as the marker's: three of the instances' heartbeats

local function publish(r)
  if WAKE ~= NONE then
    for inst, _ in pairs(WAKE) do
      redis.call('PUBLISH', 'sema:wake:' .. inst, S)
    end
  end
  if not S or #ACTS == 0 then
    return r
  end
  local pt = redis.call('HGET', KS, 'log')
  if not pt then
    return r
  end
  local uid, seq = string.match(pt, '^(%d+)-(%d+)$')
  if not uid then
    uid, seq = N(nowus()), '0'
  end
  seq = tonumber(seq)
  local KE, ev, first, ended = S .. ':e', {}, seq + 1, false
  if seq == 0 then
    redis.call('DEL', KE) -- a new run: what the stream holds is an older one's
  end
  for i = 1, #ACTS, 11 do
    local t = ACTS[i]
    if PUBLIC[t] then
      local a = {}
      for j = 0, 10 do
        a[j + 1] = ACTS[i + j]
        ev[#ev + 1] = ACTS[i + j]
      end
      seq = seq + 1
      if t == 'deleted' then
        ended = true
      else
        local id = uid .. '-' .. N(seq)
        local p = table.concat(a, '\0')
        local x = redis.pcall('XADD', KE, 'MAXLEN', '~', LOG_MAX_S, id, 'a', p)
        if type(x) == 'table' and x.err then
          redis.call('DEL', KE) -- cannot happen (ids only grow): keep the run going anyway
          redis.call('XADD', KE, 'MAXLEN', '~', LOG_MAX_S, id, 'a', p)
        end
      end
    end
  end
  if #ev == 0 then
    return r
  end
  if ended then
    redis.call('DEL', KE)
    redis.call('HDEL', KS, 'log')
  else
    redis.call('PEXPIRE', KE, LOG_TTL_S)
    redis.call('HSET', KS, 'log', uid .. '-' .. N(seq))
  end
  local id = uid .. '-' .. N(first)
  redis.call('PUBLISH', 'sema:ev:' .. S, INST .. '\0' .. id .. '\0' .. table.concat(ev, '\0'))
  if type(r[7]) == 'string' then -- the caller numbers its own events from its reply
    r[7] = r[7] .. '\0' .. uid .. '\0' .. N(first)
  end
  return r
end

local function main(keys, args)
  KEYS, ARGV = keys, args
  if not fmt then
    fmt, match, concat, floor = string.format, string.match, table.concat, math.floor
  end
  OP, EPOCH, INST, RID = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
  PRINC = ARGV[6]
  local fl = ARGV[7] -- '0', '1', '0r' or '1r'
  ADMIN = (fl == '1' or fl == '1r') and '1' or '0'
  RETRY = fl == '0r' or fl == '1r'
  local t = redis.call('TIME')
  local sec, us = t[1] + 0, t[2] + 0 -- (Lua parses a string once; tonumber twice)
  NOW = sec * 1000 + floor(us / 1000)
  NOWUS = sec * 1000000 + us
  ACTS, WAKE, GRANTED = NONE, NONE, NONE
  S, M, LID, LEASE, SAFE_AT, MORE, LOCK_NEW = nil, nil, nil, nil, 0, false, false
  DUE0, MOLD, OWN, REBUILT, NOWS = -2, nil, false, false, nil
  if RID ~= '' and RETRY then
    local c = redis.call('GET', 'sema:r:' .. RID)
    if c then
      return cmsgpack.unpack(c)
    end
  end
  local r = publish(run())
  -- The answer to a write is kept for a retry, unless a retry can work it out again from
  -- what the write left (a grant made at once: its lease; a release: its tombstone) and
  -- nothing in it completes a parked request of this instance.
  if RID ~= '' and r[1] ~= 'E' and not (REBUILT and r[1] == '0' and not OWN) then
    redis.call('SET', 'sema:r:' .. RID, cmsgpack.pack(r), 'PX', RESULT_TTL_MS)
  end
  return r
end

redis.register_function('sema', main)
