#!lua name=sema
-- SPDX-License-Identifier: MIT
-- sema.lua - the Redis back end's operations, a Redis Functions library (FUNCTION LOAD once
-- per connection, FCALL sema for every operation; src/backends/redis/redis.c). The library's
-- helpers are defined once, when it is loaded; a call only runs them. See docs/redis.md for
-- the keys and docs/architecture.md for why the work is split this way.
--
-- The protocol's constants (the tables P, ACT, E, MSG and MSG_CODE) are generated from
-- redis_proto.h and be_msg.h when semad is built, in place of the next line:
-- @PROTO@
--
-- Every call: KEYS[1] names what it works on (a semaphore's stem, a lease id's key, the name
-- index); ARGV = the head (redis_proto.h RS_HEAD_MAP: op, epoch, flags ('1' or '0': the
-- token that sent the request is an admin and may end any lease; then 'r' when the command
-- is sent again, so it may have run already), instance, request id, principal (the token
-- with semad --auth, '' without)), then the op's own arguments from ARGV[A]. A plain acquire
-- or release may come with all of them in one argument instead (redis_proto.h: RS_PK_*; see
-- SP.packed).
-- A call reads Redis's clock (TIME), checks the epoch, answers a retried request id from its
-- cache, does its housekeeping (due leases expire, the waiters of dead instances leave, the
-- queue's head is admitted), does its work, and returns:
--   { status, message id, now_ms, next_due_ms, acts, stem, counts, result... }
-- (redis_proto.h: RS_REPLY_MAP; the message id names its text in be_msg.h, which C renders),
-- every value a string (Lua's numbers would lose digits in cjson and in tostring). `acts` and
-- `counts` are each one string of NUL-separated fields: Redis makes a reply element of every
-- value, at a cost well above one concatenation's; redis.c reads them as arrays.
-- `acts` is a flat list, P.ACT_LEN fields per act (RS_ACT_FIELD_MAP): what happened, in order (public events,
-- and the outcomes of parked requests: the calling instance completes its own at once; those
-- of other instances are kept under :g and the instance is woken by PUBLISH).

-- The state of one call, set by main() (a library keeps its upvalues between calls).
local KEYS, ARGV
local OP, EPOCH, INST, RID, PRINC, ADMIN, RETRY
local A = P.A -- first argument of the op
local NOW, NOWUS -- Redis's clock in milliseconds and in microseconds
local function nowus()
  return NOWUS
end
local LID -- the lease id a lease op names
-- Where the keys that are not one semaphore's live, and how a call publishes. On one Redis
-- (or Sentinel's): 'sema:' and PUBLISH. On Redis Cluster (a call's flags end with 'c'): the
-- hash tag of KEYS[1], 'sema:{tag}', so every key a call touches is in one slot (the instance
-- gives every semaphore of a slot the same tag: the slot's due index, epoch, instance records,
-- lease and ticket ids and request results are that slot's), and SPUBLISH on that slot.
local H, PUB = 'sema:', 'PUBLISH'
-- (strings: a number passed to redis.call is formatted with %.17g on every call)
local HK_MAX = P.HK_MAX -- leases expired or waiters admitted per call (the rest: next call)

-- Lua's own functions as upvalues: a call reaches them without a look-up in the globals (set
-- by main: the globals are not reachable while the library loads; once they are, a global
-- is looked up in a library's own table first, then in Redis's, behind a metatable). (rcall
-- ... sbyte: for the short paths)
local fmt, match, concat, floor
local rcall, spack, sunpack, sbyte

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

-- Strings as numbers: those that come back call after call (an epoch, Redis's clock's
-- seconds, a weight, a ttl) are parsed once (Lua's parse, strtod, costs far more than a
-- look-up). Bounded as NMEMO.
-- SP: what the short paths use (below), in one table: a chunk has at most 200 locals.
local SP = {nums = {}, nn = 0}
function SP.num(s)
  local x = s + 0
  if SP.nn >= 4096 then
    SP.nums, SP.nn = {}, 0
  end
  SP.nums[s] = x
  SP.nn = SP.nn + 1
  return x
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
local KM, KF, KQ, KW, KX, KI, KA, KS
local KT, KK, KTL, KFW, KEST, KH -- tickets: records, keepalive deadlines, lease id -> ticket
-- id, the weight that left the queue by place (a Fenwick tree, below), the estimate's samples,
-- the leases by grant time

-- The keys of recent stems are kept (the library lives as long as its Lua state): a call on a
-- semaphore seen lately builds none of its ten strings again. Bounded: short stems only, and
-- the memo starts over past P.KEYSETS_MAX of them.
local KEYSETS, NKEYSETS = {}, 0
local function keys_of(stem)
  S = stem
  local k = KEYSETS[stem]
  if not k then
    local tag, kind, name = match(stem, '^(sema:{[^}]*})(.):(.*)$')
    k = {tag, kind, name, stem .. ':m', stem .. ':f', stem .. ':q', stem .. ':w', stem .. ':x',
         stem .. ':i', stem .. ':a', stem .. ':s', stem .. ':t', stem .. ':k', stem .. ':tl',
         stem .. ':fw', stem .. ':est', stem .. ':h'}
    if #stem <= 200 then
      if NKEYSETS >= P.KEYSETS_MAX then
        KEYSETS, NKEYSETS = {}, 0
      end
      KEYSETS[stem] = k
      NKEYSETS = NKEYSETS + 1
    end
  end
  TAG, KIND, NAME, KM, KF, KQ, KW, KX, KI, KA, KS =
    k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8], k[9], k[10], k[11]
  KT, KK, KTL, KFW, KEST, KH = k[12], k[13], k[14], k[15], k[16], k[17]
end

-- What the short paths need of a stem's keys (the rest is the general path's: it sets them
-- all again with keys_of): its kind, row, expiry index and idempotency keys.
function SP.keys(stem)
  local k = KEYSETS[stem]
  if not k then
    keys_of(stem)
    return KIND, KM, KX, KI
  end
  S = stem
  return k[2], k[4], k[8], k[9]
end

-- Tickets (the section "tickets" below): hooks the shared code calls only while the row
-- counts live tickets (M.nt > 0), and the wait estimate's samples (est_*, taken then too).
local tk_lease_gone, tk_admit, tk_housekeep, tk_next_due, tk_delete_all, tk_resize, fw_left
local fw_prefix
local est_hold, est_queue_grant, tk_run
local follow
-- Limits (the section "limits" below): hooks the shared code calls only while the row says the
-- semaphore has them (M.lim), and LIM, their state then.
-- (LH: the hooks, LH.load ... LH.view; LH.self_wid: an acquire joining the line, and
-- LH.self_lease its lease when this very admission grants it)
local LIM, LH = nil, {}
-- Requests and leases on several semaphores (the section "several semaphores" below): MU.
-- (KIND: a waiter's kind as views say it; 4: a ticket on several semaphores, see MU.kind)
-- (MU.wc, MU.afc, MU.htc: what a call learned of requests on several semaphores, its parts
-- and whether they are first or hold a turn, kept while MU.ver stays: every change of a line's
-- first waiters or of a turn moves it on)
local MU = {KIND = {i = '1', t = '2', m = '3'}, wc = {}, afc = {}, htc = {}, ver = 0}

local ACTS, WAKE
local NONE = {} -- ACTS, WAKE and GRANTED until a call has one: never written to
local REBUILT -- a retry of this call can rebuild its answer (main)
local M -- the semaphore's row while loaded
local LOG -- its event log's point "<uid>-<seq>" when someone follows its events (publish)

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
-- A live lease's record is its id's key, sema:id:LID: 'l', then packed with struct (LREC)
-- its weight, fence, ttl, acquired and expiry times and mode, then its owner, idempotency
-- key, principal and semaphore's stem; so a release reads its lease, and a grant writes it,
-- in one command, with no number formatted or parsed. :x holds every live lease of the
-- semaphore by expiry.
local LREC = '<ddddddHc0Hc0Hc0Hc0'
SP.lrec_l = '<BddddddHc0Hc0Hc0Hc0' -- ('l' first: one string made, not two)
local MODE = {[0] = '0', [1] = '1', [2] = '2'}
-- The lease in an id key's value v and its stem (nil for anything else: a tombstone).
local function lparse(v)
  if string.byte(v, 1) ~= 108 then -- 'l'
    return nil, nil
  end
  local w, f, ttl, acq, exp, mode, owner, idem, princ, stem = struct.unpack(LREC, v, 2)
  return {w = w, f = f, ttl = ttl, acq = acq, exp = exp, mode = MODE[mode], owner = owner,
          idem = idem, princ = princ}, stem
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
  return l
end
local function lget(lid)
  return lread(lid, redis.call('GET', H .. 'id:' .. lid))
end
-- A lease's record of this semaphore (mode: a number).
local function lrecord(w, f, ttl, acq, exp, mode, owner, idem, princ)
  return spack(SP.lrec_l, 108, w, f, ttl, acq, exp, mode, #owner, owner, #idem, idem, #princ,
               princ, #S, S)
end
local function lwrite(lid, l)
  lstr(l) -- (the general path shows it too: its act, its result)
  redis.call('SET', H .. 'id:' .. lid, lrecord(l.w, l.f, l.ttl, l.acq, l.exp, l.mode + 0,
                                                l.owner, l.idem, l.princ))
end
-- Every live lease of this semaphore: a list of {lease id, lease}, by expiry.
local function lall()
  local ids, out = redis.call('ZRANGE', KX, '0', '-1'), {}
  for i = 1, #ids, 500 do -- (unpack has a bound)
    local ks = {}
    for j = i, math.min(i + 499, #ids) do
      ks[#ks + 1] = H .. 'id:' .. ids[j]
    end
    local vs = redis.call('MGET', unpack(ks))
    for j = 1, #ks do
      local lid = ids[i + j - 1]
      local l = lread(lid, vs[j])
      if not l and vs[j] and string.byte(vs[j], 1) == 109 then
        l = MU.part(MU.lparse(vs[j]), S) -- its part here of a lease on several
      end
      if l then
        out[#out + 1] = {lid, l}
      end
    end
  end
  return out
end

-- A waiter: instance, weight (0: wait-idle), kind (a acquire, i idle), since, ttl, owner,
-- idempotency key, the lease id it will get, mode, principal, tenant ('' for none).
local function wpack(w)
  return table.concat({w.inst, N(w.w), w.kind, N(w.since), N(w.ttl), w.owner, w.idem, w.lid,
                       w.mode, w.princ, w.tenant or ''}, '\0')
end
local function wunpack(s)
  local a = fields(s)
  return {inst = a[1], w = tonumber(a[2]), kind = a[3], since = tonumber(a[4]),
          ttl = tonumber(a[5]), owner = a[6] or '', idem = a[7] or '', lid = a[8] or '',
          mode = a[9] or '0', princ = a[10] or '', sw = a[2], sttl = a[5], tenant = a[11] or ''}
end

-- With semad --auth, a lease (or a parked request) is its token's: only that token, or an
-- admin, may end it or take it over.
local function allowed(princ)
  return PRINC == '' or ADMIN == '1' or princ == PRINC
end

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
              l.owner, extra or l.mode, l.tn or ''}
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
  ACTS[n + 12] = l and l.tn or ''
end

-- The outcome of a parked request: its own instance completes it. Another instance finds it
-- in sema:g:<instance> (woken by a message; its heartbeat, `beat`, collects it too if the
-- message is lost): the stem, then as an act's fields.
local function outcome(typ, wid, w, lid, l, extra)
  extra = extra or (l and l.mode) or ''
  act(typ, wid, w.inst, lid, l, extra)
  if w.inst == INST and MU.cx and S ~= MU.first then
    -- (this semaphore's acts go out as events only: the completion rides in the reply)
    MU.tell(typ, wid, w, lid, l, extra, S)
  elseif w.inst ~= INST then
    local rec = typ .. '\0' .. lid .. '\0' .. (extra or '') .. '\0' .. (l and lpack(l) or '')
    redis.call('HSET', H .. 'g:' .. w.inst, wid, S .. '\0' .. rec)
    if WAKE == NONE then
      WAKE = {}
    end
    WAKE[w.inst] = true
  end
end

-- A waiter joined the queue (ACT.QUEUED) or left it without a grant (ACT.LEFT), as an event
-- for those who follow the semaphore's (a semaphore's only: a lock key has no stream); the
-- queue's count and weight after it ride in the fence and ttl fields, its kind (1 wait-idle,
-- 2 ticket) in the expiry's, as the view's list of waiters says them.
local function waiter_event(typ, w)
  if KIND ~= 's' or M.ev == 0 then
    return -- nobody follows its events: nothing to say
  end
  act(typ, '', '', '', {sw = w.sw or N(w.w), sf = N(M.nq), sttl = N(M.wq), sacq = N(w.since),
                        sexp = MU.kind(w),
                        owner = w.owner, tn = w.tenant}, w.kind == 'i' and '0' or w.mode)
end

-- Counts of everything (for /healthz and the limits): semaphores, leases, lock keys. They
-- live in the epoch's hash, read by every call with the epoch (run), and every reply tells
-- them; a call that changes one sends the new value.
local STATS = {} -- field -> the count's string (a table kept from call to call)

-- The count of leases, off the short paths. The short acquire and release write no count:
-- they add to their slot's LQ.by[H].d, kept in the library's Lua state, and every reply
-- tells the epoch hash's `leases` plus it. The state goes when the library is loaded again or
-- another Redis becomes the primary, and with it what it had not written to the hash (a
-- `beat` or a `sweep` writes it); so while it has any, the hash's field `lq` names the state
-- (LQ.token). A state that finds `lq` other than it expects counts the leases again from
-- the semaphores' expiry indexes (every live lease is in its semaphore's :x): once per load
-- or failover, one call of O(semaphores and lock keys) in that slot. LQ.by[H]: {d = the
-- count not in the hash, dirty = `lq` names this state}, nil until a general call checked.
local LQ = {by = {}} -- (in one table: a chunk has at most 200 locals)
local function count(field, d) -- d: '1' or '-1'
  local n = redis.call('HINCRBY', H .. 'epoch', field, d)
  if field == 'leases' then
    n = n + LQ.by[H].d
  end
  STATS[field] = N(n)
end
function LQ.recount()
  local n = 0
  for _, ix in ipairs({H .. 'names', H .. 'locks'}) do
    local m = redis.call('ZRANGE', ix, '0', '-1')
    for i = 1, #m do
      n = n + redis.call('ZCARD', match(m[i], '%z(.*)$') .. ':x')
    end
  end
  redis.call('HSET', H .. 'epoch', 'leases', N(n))
  redis.call('HDEL', H .. 'epoch', 'lq')
  return n
end
-- lq, stored: the epoch hash's `lq` and `leases` as read (false when absent: HMGET's nil
-- comes to Lua as false). The number of leases.
function LQ.check(lq, stored)
  lq = lq or nil -- (else every call would find a mark that is not there, and count again)
  stored = tonumber(stored or '0')
  local ls = LQ.by[H]
  if lq ~= (ls and ls.dirty and LQ.token or nil) or (not ls and lq) then
    stored = LQ.recount() -- (another state's changes may be missing from the hash)
    ls = nil
  end
  if not ls then
    LQ.token = LQ.token or N(NOWUS)
    ls = {d = 0, dirty = false}
    LQ.by[H] = ls
  end
  return stored + ls.d
end
-- Before a short path first changes the count of a clean state: false when it may not (the
-- general path checks).
function LQ.mark(ls)
  if redis.call('HSETNX', H .. 'epoch', 'lq', LQ.token) == 0 then
    LQ.by[H] = nil -- another state's mark: the next general call counts again
    return false
  end
  ls.dirty = true
  return true
end
-- The short paths' changes into the hash (beat, sweep).
function LQ.flush()
  local ls = LQ.by[H]
  if ls.dirty then
    if ls.d ~= 0 then
      redis.call('HINCRBY', H .. 'epoch', 'leases', N(ls.d))
    end
    redis.call('HDEL', H .. 'epoch', 'lq')
    ls.d, ls.dirty = 0, false
  end
end
local function locks_now()
  return tonumber(STATS.locks)
end

-- The latest expiry of any lease ever granted: after Redis lost its data, instances know
-- from it how long a holder they can no longer see may still be running. It lives in the
-- epoch's hash (read by every call with the epoch) and is kept a second ahead, so it is
-- written at most once a second, not at every grant (by the grant that passes it: here, or
-- acquire_at_once's own, whose instance counts its lease itself).
local HORIZON, HORIZON_S
local SAFE_AT = 0 -- no grant before this (Redis ms): the pause after lost data
local function bump_horizon(exp)
  if not HORIZON then
    HORIZON = HORIZON_S + 0
  end
  if exp > HORIZON then
    HORIZON = exp + 1000
    HORIZON_S = N(HORIZON)
    redis.call('HSET', H .. 'epoch', 'horizon', HORIZON_S)
  end
end

-- ---- the row ----
-- A semaphore's row is one string, :m: the numbers of ROW (redis_proto.h RS_ROW_MAP) packed
-- with struct (ROW_FMT), read whole with one GET and written whole with one SET (far less
-- work for Redis than the fields of a hash: each field a hash read makes costs it a search
-- and a string). The short paths below write AVAIL, HELD and FENCE in place (SETRANGE at
-- ROW_AT). `due`: no later than the first time something is due here (a lease's expiry, a
-- dead instance's waiters, the end of a pause), 0 when nothing is; a call before it skips the
-- housekeeping. It may be early (a release leaves it): the housekeeping then finds nothing
-- and sets it right. nt: live tickets (the tickets section).
local function mload()
  local v = redis.call('GET', KM)
  if not v then
    return nil
  end
  local t, m = {struct.unpack(ROW_FMT, v)}, {}
  for i = 1, #ROW do
    m[ROW[i]] = t[i]
  end
  m.lim = #v > #ROW * 8
  M = m
  if m.lim then
    LH.load(v)
  else
    LIM = nil -- (a listing loads one row after another)
  end
  return m
end
local function msave()
  M.ep = EPOCH + 0
  M.pa = NOW < SAFE_AT and SAFE_AT or 0
  M.hz = HORIZON or HORIZON_S + 0
  local tail = M.lim and LH.save() or '' -- (a row with limits: the limits' numbers follow)
  local t = {}
  for i = 1, #ROW do
    t[i] = M[ROW[i]]
  end
  redis.call('SET', KM, struct.pack(ROW_FMT, unpack(t)) .. tail)
end
-- A new row goes on from the fence its name handed out last (kept after a delete).
local function mnew(cap, legacy)
  return {cap = cap, avail = cap, held = 0, fence = tonumber(redis.call('GET', KF) or '0'),
          legacy = legacy, created = NOW, seq = 0, nq = 0, wq = 0, due = 0, nt = 0, ev = 1,
          ep = 0, pa = 0, hz = 0}
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
local ENDED = {[ACT.RELEASED] = 'R', [ACT.EXPIRED] = 'E', [ACT.REVOKED] = 'V',
               [ACT.DELETED] = 'D'}

-- l: the lease when the caller has read it already
local function lease_end(lid, why, l)
  if not l then
    local v = redis.call('GET', H .. 'id:' .. lid)
    l = lread(lid, v)
    if not l then
      if v and string.byte(v, 1) == 109 then -- 'm': on several semaphores
        return MU.lease_end(lid, why, v)
      end
      return nil
    end
  end
  redis.call('ZREM', KX, lid)
  local tomb = 'T' .. ENDED[why]
  if OP == 'lease_release' and lid == LID then
    tomb = tomb .. RID -- a retry of this very release finds it done (see main)
  end
  redis.call('SET', H .. 'id:' .. lid, tomb, 'PX', P.TOMB_TTL_MS_S)
  if l.idem ~= '' and redis.call('HGET', KI, l.idem) == 'L' .. lid then
    redis.call('HDEL', KI, l.idem)
  end
  M.avail = M.avail + l.w
  M.held = M.held - l.w
  count('leases', '-1')
  if M.lim then
    l.tn = LH.unhold(lid, l.w)
  end
  if M.nt > 0 then
    redis.call('ZREM', KH, lid)
    est_hold(NOW - l.acq)
    tk_lease_gone(lid, why)
  end
  if why ~= ACT.DELETED then
    act(why, '', '', lid, l)
  end
  return l
end

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
  if M.lim then
    LH.hold(w.tenant, lid, l.w)
    l.tn = w.tenant
  end
  if M.nt > 0 then
    redis.call('ZADD', KH, l.sacq, lid)
  end
  if OP == 'collect' or OP == 'cancel' then -- (the ops that look at it)
    if GRANTED == NONE then
      GRANTED = {}
    end
    GRANTED[wid] = lid
  end
  outcome(ACT.GRANTED, wid, w, lid, l)
  return l
end

-- ---- the queue ----
-- :a counts each instance's waiters here, and sema:iw:<instance> lists the semaphores where
-- it has some, so a dead instance's waiters are found without looking at every semaphore.
local function waiter_in(inst)
  if redis.call('HINCRBY', KA, inst, '1') == 1 then
    redis.call('SADD', H .. 'iw:' .. inst, S)
  end
end
local function waiter_out(inst)
  if inst ~= '' and redis.call('HINCRBY', KA, inst, '-1') <= 0 then
    redis.call('HDEL', KA, inst)
    redis.call('SREM', H .. 'iw:' .. inst, S)
  end
end

-- Take a waiter out of the queue; `left`: without a grant (an event says so).
local function unqueue(wid, w, left)
  MU.changed()
  if M.nt > 0 then
    fw_left(wid, w.w)
  end
  if M.lim then
    LH.leave(wid, w)
  end
  redis.call('ZREM', KQ, wid)
  redis.call('HDEL', KW, wid)
  waiter_out(w.inst)
  M.nq = M.nq - 1
  M.wq = M.wq - w.w
  if w.idem ~= '' and redis.call('HGET', KI, w.idem) == 'W' .. wid then
    redis.call('HDEL', KI, w.idem)
  end
  if left then
    waiter_event(ACT.LEFT, w)
  end
end

local MORE = false -- housekeeping stopped at its bound: come back at once

-- Strict FIFO with head-of-line blocking: grant heads while they fit.
local function admit()
  if M.nq == 0 then
    return -- nobody waits: no look at the queue
  end
  if M.lim then
    return LH.admit()
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
      MU.changed()
    else
      local w = wunpack(rec)
      if w.kind == 'i' then
        if M.avail < M.cap then
          return
        end
        unqueue(wid, w, true) -- done: it takes nothing
        outcome(ACT.IDLE, wid, w, '', nil, '')
      elseif w.kind == 'm' then
        if not MU.try(wid, w) then
          return -- (next here, not yet on another of its semaphores: nobody passes it)
        end
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

-- An instance stopped beating (sweep): its waiters here leave the queue.
local function prune_instance(inst)
  local pfx = inst .. '.'
  for _, wid in ipairs(redis.call('ZRANGE', KQ, '0', '-1')) do
    if string.sub(wid, 1, #pfx) == pfx then
      local rec = redis.call('HGET', KW, wid)
      local w = rec and wunpack(rec)
      if w and w.kind == 'm' then
        MU.leave(wid) -- (from every line)
      elseif w then
        unqueue(wid, w, true)
      else
        redis.call('ZREM', KQ, wid)
      end
    end
  end
  redis.call('HDEL', KA, inst)
  redis.call('SREM', H .. 'iw:' .. inst, S)
end

local function housekeep_all()
  local due = redis.call('ZRANGEBYSCORE', KX, '-inf', nows(), 'LIMIT', '0', N(HK_MAX))
  for _, lid in ipairs(due) do
    lease_end(lid, ACT.EXPIRED)
  end
  if #due == HK_MAX then
    MORE = true
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
  if M and M.nq > 0 and SAFE_AT > NOW and (d == 0 or SAFE_AT < d) then
    d = SAFE_AT
  end
  if M and M.nt > 0 then
    d = tk_next_due(d)
  end
  if M and M.lim then
    d = LH.next_due(d)
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
      redis.call('ZREM', H .. 'locks', NAME .. '\0' .. S)
    end
    LOCK_NEW = false
    redis.call('DEL', KM, KQ, KW, KX, KI, KA)
    -- the clock floor keeps later fences above
    redis.call('SET', KF, N(M.fence), 'PX', P.TOMB_TTL_MS_S)
    M = nil
    return true
  end
  return false
end

local function save()
  if M and not lock_gc() then
    if LOCK_NEW then
      count('locks', '1')
      redis.call('ZADD', H .. 'locks', '0', NAME .. '\0' .. S)
      LOCK_NEW = false
    end
    msave()
  end
end

-- ---- results ----
local function lease_result(lid, l)
  lstr(l)
  return {lid, l.sw, l.sf, l.sttl, l.sacq, l.sexp, l.owner, l.mode, l.tn or ''}
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
  for i = 1, math.min(#ls, P.VIEW_MAX) do
    if LIM then
      ls[i][2].tn = LH.lease_tenant(ls[i][1])
    end
    for _, v in ipairs(lease_result(ls[i][1], ls[i][2])) do
      hs[#hs + 1] = v
    end
  end
  local wids = redis.call('ZRANGE', KQ, 0, P.VIEW_MAX - 1)
  for _, wid in ipairs(wids) do
    local rec = redis.call('HGET', KW, wid)
    if rec then
      local w = wunpack(rec)
      ws[#ws + 1] = w.owner
      ws[#ws + 1] = N(w.w)
      ws[#ws + 1] = N(w.since)
      ws[#ws + 1] = w.kind == 'i' and '0' or w.mode
      ws[#ws + 1] = MU.kind(w) -- 2: a ticket, 3: a part of a request on several, 4: of a ticket
      ws[#ws + 1] = w.tenant
    end
  end
  local trunc = (#ls > P.VIEW_MAX or M.nq > P.VIEW_MAX) and '1' or '0'
  r[#r + 1] = hs
  r[#r + 1] = ws
  r[#r + 1] = trunc
  r[#r + 1] = LH.view()
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
local DUE_HEAD, IDUE
local function due_head(changed)
  if changed or not DUE_HEAD then
    local g = redis.call('ZRANGE', H .. 'due', '0', '0', 'WITHSCORES')
    local h = g[2] or '0'
    if h ~= DUE_HEAD then
      DUE_HEAD = h
      redis.call('HSET', H .. 'epoch', 'due', h)
    end
  end
end
-- The semaphore's due time d (0: none) into the due index, and the head read again.
function SP.due_write(d)
  if d > 0 then
    redis.call('ZADD', H .. 'due', N(d), S)
  else
    redis.call('ZREM', H .. 'due', S)
  end
  due_head(true)
end
-- IDUE: the first time an instance's alive-until passes (sema:inst's first, + 1), kept in the
-- epoch's hash beside `due`; the due time every reply tells is the earlier of the two.
local function counts()
  local c, h = STATS, DUE_HEAD
  if IDUE ~= '0' and (h == '0' or IDUE + 0 < h + 0) then
    h = IDUE
  end
  return c.sems .. '\0' .. c.leases .. '\0' .. c.locks .. '\0' .. h .. '\0' .. HORIZON_S
end
local function inst_due()
  local f = redis.call('ZRANGE', H .. 'inst', '0', '0', 'WITHSCORES')
  local v = f[2] and N(f[2] + 1) or '0'
  if v ~= IDUE then
    IDUE = v
    redis.call('HSET', H .. 'epoch', 'idue', v)
  end
end
-- st: the status ('0', P.ST_PARKED_S, or a code); msg: a message id ('0': none)
local function answer(st, msg, res)
  local d = 0
  if MU.cx then
    MU.finish() -- the call's other semaphores first
    LOG = nil -- (the last one's)
  end
  if S and (not M or M.ev ~= 0) then
    LOG = redis.call('HGET', KS, 'log')
    if M and not LOG then
      M.ev = 0 -- nobody follows its events: the calls after this one need not look
    end
  end
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
    SP.due_write(d)
  end
  return {st, msg, nows(), d == 0 and '0' or N(d), concat(ACTS, '\0'), S or '', counts(),
          unpack(res or NONE)} -- (one table of its size)
end
-- Done (status 0, with the op's result) or parked (P.ST_PARKED).
local function reply(status, res)
  return answer(status == 0 and '0' or P.ST_PARKED_S, '0', res)
end
-- Refused with message `id` (MSG), whose status code it answers.
local function refuse(id)
  return answer(N(MSG_CODE[id]), N(id), nil)
end
-- Granted at once, nobody waiting (the plain acquire and the limits' alike).
function SP.grant_now(w, wid)
  local own = OWN
  local l = grant(w, w.lid, wid)
  OWN = own -- the caller's own grant completes no parked request: a retry rebuilds it
  REBUILT = true
  return reply(0, lease_result(w.lid, l))
end

-- What a lease's tombstone answers ('T' and the letter of ENDED).
local TOMB = {R = MSG.LEASE_RELEASED, E = MSG.LEASE_EXPIRED, V = MSG.LEASE_REVOKED,
              D = MSG.LEASE_SEM_DELETED}

-- ---- operations ----
local ops = {}

local function create(legacy)
  local max = tonumber(ARGV[A + 1])
  if max > 0 and redis.call('ZCARD', H .. 'names') >= max then
    return refuse(MSG.TOO_MANY_SEMS)
  end
  M = mnew(tonumber(ARGV[A]), legacy)
  msave()
  count('sems', '1')
  redis.call('ZADD', H .. 'names', '0', NAME .. '\0' .. S)
  return nil
end

-- put: capacity, max semaphores, then the limits it names (RS_LIM_MAP) -> created, view
function ops.put()
  local tm, rate, burst, bad = LH.wanted(A + 2, true)
  if bad then
    return refuse(bad)
  end
  if M then
    if M.cap ~= tonumber(ARGV[A]) then
      return refuse(MSG.SEM_OTHER_CAPACITY)
    end
    local htm, hrate, hburst = 0, 0, 0
    if LIM then
      htm, hrate, hburst = LIM.tm, LIM.rate, LIM.burst
    end
    if htm ~= tm or hrate ~= rate or hburst ~= burst then
      return refuse(MSG.SEM_OTHER_LIMITS)
    end
    return reply(0, cat({'0'}, view(true)))
  end
  local r = create(0)
  if not r then
    LH.set(tm, rate, burst)
  end
  return r or reply(0, cat({'1'}, view(true)))
end

function ops.legacy_create()
  if M then
    return refuse(MSG.SEM_EXISTS)
  end
  local r = create(1)
  return r or reply(0, cat({'1'}, view(false)))
end

function ops.get()
  return reply(0, cat({'0'}, view(true)))
end

function ops.legacy_value()
  return reply(0, cat({'0'}, view(false)))
end

function ops.lock_get()
  return reply(0, cat({'0'}, view(true)))
end

local function delete_all()
  MU.changed() -- (its lines go)
  if M.nt > 0 then
    tk_delete_all()
  end
  for _, wid in ipairs(redis.call('ZRANGE', KQ, '0', '-1')) do
    local rec = redis.call('HGET', KW, wid)
    if rec then
      local w = wunpack(rec)
      waiter_out(w.inst)
      if w.kind == 'm' then
        MU.failed(wid, w, MU.leave(wid, S), MSG.WAITER_SEM_DELETED) -- (its other lines)
      else
        outcome(ACT.FAIL, wid, w, '', nil, MSG.WAITER_SEM_DELETED)
      end
    end
  end
  if M.lim then
    M.lim = false -- (what the tenants hold goes with every key of the limits)
    LH.drop()
  end
  for _, lid in ipairs(redis.call('ZRANGE', KX, '0', '-1')) do
    lease_end(lid, ACT.DELETED)
  end
  act(ACT.DELETED, '', '', '', nil, '')
  redis.call('SET', KF, N(M.fence))
  redis.call('DEL', KM, KQ, KW, KX, KI, KA, KEST)
  redis.call('ZREM', H .. 'names', NAME .. '\0' .. S)
  count('sems', '-1')
  M = nil
end

function ops.delete()
  delete_all()
  return reply(0)
end

-- resize: capacity (0: as it is), then the limits it names (RS_LIM_MAP)
function ops.resize()
  local cap = tonumber(ARGV[A])
  if cap == 0 then
    cap = M.cap
  end
  local tm, rate, burst, bad = LH.wanted(A + 1, false)
  if bad then
    return refuse(bad)
  end
  LH.set(tm, rate, burst)
  M.avail = M.avail + cap - M.cap
  M.cap = cap
  for _, wid in ipairs(redis.call('ZRANGE', KQ, '0', '-1')) do
    local rec = redis.call('HGET', KW, wid)
    if rec then
      local w = wunpack(rec)
      local why = w.w > cap and MSG.WAITER_ABOVE_CAPACITY or LH.too_heavy(w.w)
      if w.kind == 'a' and why then
        unqueue(wid, w, true)
        outcome(ACT.FAIL, wid, w, '', nil, why)
      elseif w.kind == 'm' and why then
        MU.failed(wid, w, MU.leave(wid), why) -- the whole request fails
      end
    end
  end
  if M.nt > 0 then
    tk_resize(cap)
  end
  act(ACT.RESIZED, '', '', '', nil, N(cap))
  admit()
  return reply(0, cat({'0'}, view(true)))
end

function ops.legacy_up()
  if M.avail >= P.CAP_MAX then
    return refuse(MSG.LEGACY_OVERFLOW)
  end
  M.avail = M.avail + 1
  M.legacy = 1
  admit()
  return reply(0, cat({'0'}, view(false)))
end

function ops.legacy_down()
  if M.avail < 1 or M.nq > 0 then
    return refuse(MSG.LEGACY_LOCKED)
  end
  M.avail = M.avail - 1
  M.legacy = 1
  return reply(0, cat({'0'}, view(false)))
end

-- The limits an acquire carries (RS_ACQ_MAP LIMITS): 1 max lock keys, 2 max waiters here,
-- 3 readers a lock admits.
local function limit(i)
  local t = {match(ARGV[A + 6], '^(%d+) (%d+) (%d+)$')}
  return tonumber(t[i] or '0')
end

-- Park a request at the tail of the queue.
local function park(wid, w)
  local maxw = limit(2)
  if maxw > 0 and M.nq >= maxw then
    return refuse(MSG.TOO_MANY_WAITERS)
  end
  if not redis.call('ZSCORE', H .. 'inst', INST) then
    return answer(P.ST_GONE_S, '0', nil) -- this instance was taken for dead
  end
  M.seq = M.seq + 1
  if M.lim then
    LH.join(wid, w, M.seq) -- (a wait-idle: always room)
  end
  redis.call('ZADD', KQ, N(M.seq), wid)
  redis.call('HSET', KW, wid, wpack(w))
  waiter_in(INST)
  M.nq = M.nq + 1
  M.wq = M.wq + w.w
  if w.idem ~= '' then
    redis.call('HSET', KI, w.idem, 'W' .. wid)
  end
  waiter_event(ACT.QUEUED, w)
  return reply(P.ST_PARKED)
end


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
      return refuse(MSG.KEY_OTHER_TOKEN)
    end
    return refuse(MSG.KEY_NAMES_TICKET)
  end
  if string.sub(v, 1, 1) == 'L' then
    local l = lget(ref)
    if not l then
      return nil
    end
    if not allowed(l.princ) then
      return refuse(MSG.KEY_OTHER_TOKEN)
    end
    if l.w ~= w.w or l.mode ~= w.mode then
      return refuse(MSG.KEY_OTHER_WEIGHT)
    end
    if (LIM and LH.lease_tenant(ref) or '') ~= w.tenant then
      return refuse(MSG.KEY_OTHER_TENANT)
    end
    return reply(0, lease_result(ref, l))
  end
  local rec = redis.call('HGET', KW, ref)
  if not rec then
    return nil
  end
  local old = wunpack(rec)
  if not allowed(old.princ) then
    return refuse(MSG.KEY_OTHER_TOKEN)
  end
  if old.w ~= w.w or old.kind ~= w.kind or old.mode ~= w.mode then
    return refuse(MSG.KEY_OTHER_WEIGHT)
  end
  if old.tenant ~= w.tenant then
    return refuse(MSG.KEY_OTHER_TENANT)
  end
  if not wait then
    return refuse(MSG.NOT_AVAILABLE)
  end
  -- the retry takes the first attempt's place: same position, its own instance
  if not redis.call('ZSCORE', H .. 'inst', INST) then
    return answer(P.ST_GONE_S, '0', nil) -- this instance was taken for dead
  end
  local score = redis.call('ZSCORE', KQ, ref)
  redis.call('ZREM', KQ, ref)
  redis.call('HDEL', KW, ref)
  waiter_out(old.inst)
  waiter_in(INST)
  old.inst = INST
  old.lid = w.lid
  old.ttl, old.sttl = w.ttl, w.sttl
  old.owner = w.owner
  redis.call('ZADD', KQ, score, wid)
  redis.call('HSET', KW, wid, wpack(old))
  redis.call('HSET', KI, w.idem, 'W' .. wid)
  if M.lim then
    LH.replace(ref, wid, old, score)
  end
  outcome(ACT.FAIL, ref, wunpack(rec), '', nil, MSG.WAITER_REPLACED)
  return reply(P.ST_PARKED)
end

-- An acquire on a semaphore with limits (or naming a tenant): it joins the line, and
-- admission says whether it goes at once; a try that does not leaves without a trace.
LH.acquire = function(wid, w, wait)
  if not M.lim then
    LH.activate()
  end
  local heavy = LH.too_heavy(w.w)
  if heavy then
    return refuse(heavy)
  end
  local maxw = limit(2)
  if maxw > 0 and M.nq >= maxw then
    return refuse(MSG.TOO_MANY_WAITERS_OR_TENANTS)
  end
  if LH.at_once(w) then
    -- nobody waits and it fits: what joining the line and admitting it would do, in short
    return SP.grant_now(w, wid)
  end
  if wait and not redis.call('ZSCORE', H .. 'inst', INST) then
    return answer(P.ST_GONE_S, '0', nil) -- this instance was taken for dead
  end
  M.seq = M.seq + 1
  if not LH.join(wid, w, M.seq) then
    return refuse(MSG.TOO_MANY_WAITERS_OR_TENANTS)
  end
  redis.call('ZADD', KQ, N(M.seq), wid)
  redis.call('HSET', KW, wid, wpack(w))
  waiter_in(INST)
  M.nq = M.nq + 1
  M.wq = M.wq + w.w
  LH.self_wid = wid
  admit()
  LH.self_wid = nil
  if LH.self_lease then
    REBUILT = true
    return reply(0, lease_result(w.lid, LH.self_lease))
  end
  if not wait then
    unqueue(wid, w)
    admit()
    return refuse(MSG.NOT_AVAILABLE)
  end
  waiter_event(ACT.QUEUED, w)
  if w.idem ~= '' then
    redis.call('HSET', KI, w.idem, 'W' .. wid)
  end
  return reply(P.ST_PARKED)
end

-- acquire: weight (or mode for a lock), wait (0 try, 1 wait), ttl, owner, idem, lease id,
-- waiter id, max lock keys, max waiters here, lock readers, [tenant]
local function acquire()
  local wait = ARGV[A + 1] == '1'
  local w = {inst = INST, w = ARGV[A] + 0, kind = 'a', since = NOW,
             ttl = ARGV[A + 2] + 0, owner = ARGV[A + 4], idem = ARGV[A + 5],
             lid = ARGV[A + 3], mode = '0', princ = PRINC, sw = ARGV[A], sttl = ARGV[A + 2],
             tenant = ARGV[A + 7] or ''}
  local wid = RID
  if KIND == 'k' then
    -- the mode is kept apart from the weight: with one reader allowed both modes weigh 1
    if w.w == 0 then
      w.w, w.mode, w.sw = M.cap, '2', nil
    else
      w.mode = '1'
    end
  end
  if w.w < 1 or w.w > M.cap then
    return refuse(MSG.BAD_WEIGHT)
  end
  if RETRY then
    -- sent again: a grant made at once was not cached (main); its lease tells it
    local t = redis.call('GET', H .. 'id:' .. w.lid)
    local l = lread(w.lid, t)
    if l then
      return reply(0, lease_result(w.lid, l))
    end
    if t and string.sub(t, 1, 1) == 'T' then
      return refuse(TOMB[string.sub(t, 2, 2)])
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
    return refuse(MSG.REDIS_STATE_LOST)
  end
  if M.lim or w.tenant ~= '' then
    return LH.acquire(wid, w, wait)
  end
  if M.nq == 0 and w.w <= M.avail then
    return SP.grant_now(w, wid)
  end
  if not wait then
    return refuse(MSG.NOT_AVAILABLE)
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
    return reply(0, {'idle'})
  end
  if not wait then
    return refuse(MSG.NOT_IDLE)
  end
  return park(RID, {inst = INST, w = 0, kind = 'i', since = NOW, ttl = 0, owner = '',
                            idem = '', lid = '', mode = '0', princ = PRINC})
end

-- ---- leases (KEYS[1] is the lease id's key: LID; LEASE its lease, read by run) ----
local LEASE

function ops.lease_get()
  if LIM then
    LEASE.tn = LH.lease_tenant(LID)
  end
  return reply(0, lease_result(LID, LEASE))
end

-- renew: ttl
function ops.lease_renew()
  local l = LEASE
  if not allowed(l.princ) then
    return refuse(MSG.LEASE_OTHER_TOKEN)
  end
  l.ttl = tonumber(ARGV[A])
  l.exp = NOW + l.ttl
  l.sttl, l.sexp = nil, nil
  lwrite(LID, l)
  redis.call('ZADD', KX, l.sexp, LID)
  bump_horizon(l.exp)
  due_at(l.exp)
  return reply(0, lease_result(LID, l))
end

local function end_op(why)
  REBUILT = why == ACT.RELEASED
  if not allowed(LEASE.princ) then
    return refuse(MSG.LEASE_OTHER_TOKEN)
  end
  lease_end(LID, why, LEASE)
  if why == ACT.REVOKED then
    next_fence() -- a fenced write with the old token now loses
  end
  admit()
  return reply(0)
end

function ops.lease_release()
  return end_op(ACT.RELEASED)
end

function ops.lease_revoke()
  return end_op(ACT.REVOKED)
end

-- ---- the uncontended acquire and release, in short ----
-- The row's first fields, up to the one each short path reads last (struct makes a Lua value
-- of every field it unpacks; the release's from AVAIL on); made by main (the globals are not
-- reachable while the library loads).
-- (SP.to_hz, SP.avail_to_ev, SP.avail)

-- An acquire granted at once, and a release of units nobody waits for, on a semaphore with
-- nothing to file or that has come due, no tickets and nobody following its events: what
-- grant() and lease_end() (then admit() and reply(), with nothing to do) do for them, with the
-- row and the lease in locals rather than tables (a table costs Lua more than its fields),
-- the row written in place, and a number or one short string for an answer (redis_proto.h:
-- RS_SHORT_GRANT: numbers packed, not formatted). They run before the general path reads the
-- epoch's hash: the row says what they need of it (ep, pa, hz: the row's fields above), and
-- the instance sends a plain flag only while it knows of no pause. Nil for any other call,
-- which takes the general path.
-- (k: the stem; the weight, ttl and epoch as numbers; the lease id and owner; the tenant it
-- names, or nil. An acquire naming an Idempotency-Key takes the general path.)
-- On a semaphore with limits (its row longer), the tenant's room and the bucket
-- are looked at too (LH.short_fits) and then taken (LH.short_take); an acquire naming a
-- tenant on a semaphore without limits takes the general path, which gives it some.
local function acquire_at_once(k, wt, ttl, epoch, lid, owner, packed, tenant)
  local kind, km, kx = SP.keys(k)
  if kind ~= 's' then
    return nil
  end
  local v = rcall('GET', km)
  if not v then
    return nil
  end
  local cap, avail, held, fence, nq, due, nt, ev, ep, pa, hz = sunpack(SP.to_hz, v)
  local exp = NOW + ttl
  -- (another epoch, a pause, a lease past the horizon, a due time to file or one that has
  -- come, events to log: the general path's)
  if ep ~= epoch or pa ~= 0 or nq ~= 0 or nt ~= 0 or ev ~= 0 or
     due == 0 or due <= NOW or exp < due or wt < 1 or wt > cap or wt > avail then
    return nil
  end
  local lim = #v ~= SP.rowlen
  if lim then
    if not LH.short_fits(k, wt, tenant, v) then
      return nil
    end
  elseif tenant then
    return nil
  end
  -- (the row's copy of the horizon is as old as the last call that looked, a second ahead
  -- then: past it, the acquire asks the epoch's hash, one field, and a lease past that moves
  -- it a second ahead, as bump_horizon does, and the instance adds the lease to the horizon
  -- it tells at hello; the row keeps what it found)
  local hz0 = hz
  if exp > hz then
    hz = tonumber(rcall('HGET', H .. 'epoch', 'horizon')) or 0
  end
  local ls = LQ.by[H]
  if not ls or not (ls.dirty or LQ.mark(ls)) then
    return nil
  end
  if exp > hz then
    hz = exp + 1000
    rcall('HSET', H .. 'epoch', 'horizon', N(hz))
  end
  fence = fence + 1
  if fence < NOWUS then
    fence = NOWUS
  end
  rcall('SET', H .. 'id:' .. lid, lrecord(wt, fence, ttl, NOW, exp, 0, owner, '', PRINC))
  rcall('ZADD', kx, fmt('%d', exp), lid)
  if lim then
    LH.short_take(k, km, lid, wt, tenant)
  end
  granted()
  ls.d = ls.d + 1
  if hz == hz0 then
    rcall('SETRANGE', km, ROW_AT.avail, spack('<ddd', avail - wt, held + wt, fence))
  else -- (the fields between as read)
    rcall('SETRANGE', km, ROW_AT.avail, spack('<dddddddddd', avail - wt, held + wt,
                                                        fence, nq, due, nt, ev, ep, pa, hz))
  end
  if packed and fence < NOW * 1000 + 1000 then
    -- (an integer reply, to a packed call only: in Redis's millisecond, Redis's clock is in
    -- it; the grants after the first of a microsecond, or of a batch, answer so too)
    return fence
  end
  return spack('<Bdd', 71, fence, NOW) -- 'G' (the rest of the lease is the request's)
end

-- k: the id's key of the lease (sema:id:LID). It needs no clock: a lease whose time came
-- but that no housekeeping has ended yet is released (as the embedded back end, whose timer
-- ends a lease, releases one whose timer has not run).
local function release_at_once(k)
  local v = rcall('GET', k)
  if not v or sbyte(v, 1) ~= 108 then
    return nil
  end
  local w, f, ttl, acq, exp, mode, owner, idem, princ, stem = sunpack(LREC, v, 2)
  if not allowed(princ) then
    return nil
  end
  local kind, km, kx, ki = SP.keys(stem)
  if kind ~= 's' then
    return nil
  end
  local r = rcall('GET', km)
  if not r then
    return nil
  end
  local avail, held, fence, nq, due, nt, ev = sunpack(SP.avail_to_ev, r, SP.avail)
  local ls = LQ.by[H]
  if nq ~= 0 or nt ~= 0 or ev ~= 0 or not ls then
    return nil
  end
  local lid = string.sub(k, #H + 4)
  local lim = #r ~= SP.rowlen -- (limits: the tenant's hold goes too, LH.short_free)
  if (lim and not LH.short_free(stem, lid, w, r)) or not (ls.dirty or LQ.mark(ls)) then
    return nil
  end
  if lim then
    LH.short_give(stem, km, lid)
  end
  rcall('ZREM', kx, lid)
  rcall('SET', k, 'TR' .. RID, 'PX', P.TOMB_TTL_MS_S)
  if idem ~= '' and rcall('HGET', ki, idem) == 'L' .. lid then
    rcall('HDEL', ki, idem)
  end
  ls.d = ls.d - 1
  rcall('SETRANGE', km, ROW_AT.avail, spack('<dd', avail + w, held - w))
  return acq -- (an integer reply)
end

-- A call of an acquire or a release packed in one argument s (redis_proto.h: RS_PK_*), on
-- the stem or the lease id's key keys[i] (the call's i-th: one alone, or one of a batch,
-- SP.batch): the short path's answer, or nil when it does not take it (then it wrote nothing),
-- with the head and the arguments read back into ARGV and Redis's clock read (SP.clock;
-- already read when `clocked`) for the general path. Its flag byte is '0' or '1' (the
-- principal is an admin) on one Redis, '2' or '3' on Redis Cluster (then keys[i] ends with
-- '!', as SP.head's 'c' says, and loses it here: a cluster's packed call is always alone).
SP.flag = {[48] = '0', [49] = '1', [50] = '0', [51] = '1'}
function SP.packed(keys, i, s, clocked)
  if sbyte(s, 2) < 50 then
    H, PUB = 'sema:', 'PUBLISH'
  else
    SP.on_cluster(keys, i)
  end
  local k = keys[i]
  RETRY = false
  if sbyte(s, 1) == P.PK_RELEASE then
    local _, fl, ep, princ, rid, inst = sunpack('<BBdHc0Hc0Hc0', s)
    ADMIN, PRINC, RID = SP.flag[fl], princ, rid
    local r = release_at_once(k)
    if r then
      return r
    end
    OP, EPOCH, INST = 'lease_release', N(ep), inst
    ARGV = {OP, EPOCH, ADMIN, INST, RID, PRINC}
    if not clocked then
      SP.clock()
    end
    return nil
  end
  local _, fl, ep, wt, ttl, wait, lid, owner, princ, at = sunpack('<BBdddBHc0Hc0Hc0', s)
  ADMIN, PRINC = SP.flag[fl], princ
  if not clocked then
    SP.clock()
  end
  local inst, rid, lims, tenant
  if sbyte(s, 1) == P.PK_ACQUIRE_T then -- (its tenant last)
    inst, rid, lims, tenant = sunpack('<Hc0Hc0Hc0Hc0', s, at)
  end
  local r = acquire_at_once(k, wt, ttl, ep, lid, owner, true, tenant)
  if r then
    return r
  end
  if not tenant then
    inst, rid, lims = sunpack('<Hc0Hc0Hc0', s, at)
  end
  OP, EPOCH, INST, RID = 'acquire', N(ep), inst, rid
  ARGV = {OP, EPOCH, ADMIN, INST, RID, PRINC, N(wt), SP.flag[wait], N(ttl), lid, owner, '', lims,
          tenant}
  return nil
end

-- ---- an instance's own waiters ----

-- A grant made for this instance's waiter wid, under the lease id lid it was to get, by a
-- call whose answer told it to this instance, which has not seen it yet (that answer was
-- lost with its connection): handed over as collected. False when there is none.
local function granted_unseen(wid, lid)
  if not M or lid == '' then
    return false
  end
  local l = lget(lid)
  local ml = not l and MU.lease(lid)
  if l then
    act(ACT.GRANTED + P.ACT_COLLECTED, wid, INST, lid, l, nil)
  elseif ml then
    act(ACT.GRANTED + P.ACT_COLLECTED, wid, INST, lid, MU.part(ml, ml.parts[1].s),
        MU.fences(ml))
  end
  return (l or ml) and true or false
end

-- collect: waiter id and lease id of each waiter this instance has parked here. Those Redis
-- no longer knows (neither waiting here, nor with an outcome to collect, nor holding the
-- lease a lost answer granted them) are gone. An instance asks after it could not reach
-- Redis for a while (a failover may have promoted a replica without them, or a command's
-- answer went with its connection); in steady state its beat (below), O(1), is all it sends.
function ops.collect()
  local kg = H .. 'g:' .. INST
  for i = A, #ARGV, 2 do
    local wid = ARGV[i]
    if not (M and redis.call('HEXISTS', KW, wid) == 1) and
       redis.call('HEXISTS', kg, wid) == 0 and not granted_unseen(wid, ARGV[i + 1] or '') then
      act(ACT.GONE, wid, INST, '', nil, '')
    end
  end
  return reply(0)
end

-- The outcomes kept for this instance (sema:g:INST), handed over as acts and forgotten.
local function collect_outcomes()
  local kg = H .. 'g:' .. INST
  local g = redis.call('HGETALL', kg)
  for i = 1, #g, 2 do
    local a = fields(g[i + 1]) -- stem, type, lease id, extra, the lease's fields
    local l = a[5] and a[5] ~= '' and {w = tonumber(a[5]), f = tonumber(a[6]),
               ttl = tonumber(a[7]), acq = tonumber(a[8]), exp = tonumber(a[9]),
               owner = a[10] or '', idem = a[11] or ''} or nil
    act(a[2] + P.ACT_COLLECTED, g[i], INST, a[3], l, a[4])
  end
  if #g > 0 then
    redis.call('DEL', kg)
  end
end

-- beat (KEYS[1] sema:inst): an instance proves it is alive and learns the state of Redis
-- in O(1), however many waiters it has parked: its alive-until in sema:inst moves on (the
-- sweep prunes the waiters of an instance whose alive-until has passed), the outcomes kept
-- for it are handed over (a wake-up message may have been lost), and the reply brings the
-- epoch check and the counts. An instance no longer in sema:inst was taken for dead (its
-- waiters were pruned): ST_GONE, so it answers them 503 and says hello again.
local function beat()
  if not redis.call('ZSCORE', H .. 'inst', INST) then
    return answer(P.ST_GONE_S, '0', nil)
  end
  redis.call('ZADD', H .. 'inst', N(NOW + P.ALIVE_MS), INST)
  inst_due()
  collect_outcomes()
  LQ.flush()
  return reply(0)
end

-- The sweep found an instance whose alive-until has passed: its waiters leave the queue of
-- one semaphore per call (sema:iw:<instance> lists them), then the grants made for it that
-- it never collected go back, one semaphore's per call; then it is forgotten. The due time
-- every reply tells stays at its alive-until (inst_due) while it is in sema:inst, so the
-- instances sweep again at once until it is done.
local function prune_dead(inst)
  local stem = redis.call('SRANDMEMBER', H .. 'iw:' .. inst)
  if stem then
    keys_of(stem)
    M = mload()
    if M then
      DUE0 = M.due
      prune_instance(inst)
      admit()
    else
      redis.call('SREM', H .. 'iw:' .. inst, stem)
    end
    return reply(0)
  end
  local kg = H .. 'g:' .. inst
  local g = redis.call('HGETALL', kg)
  if #g > 0 then
    keys_of(fields(g[2])[1])
    M = mload()
    for i = 1, #g, 2 do
      local a = fields(g[i + 1]) -- stem, type, lease id, extra, the lease's fields
      if a[1] == S then
        redis.call('HDEL', kg, g[i])
        if a[2] == ACT.GRANTED_S and M then
          lease_end(a[3], ACT.RELEASED)
        end
      end
    end
    if M then
      DUE0 = M.due
      admit()
    end
    return reply(0)
  end
  redis.call('ZREM', H .. 'inst', inst)
  inst_due()
  return reply(0)
end

-- cancel: waiter id, why (t: its timeout, the grant is delivered if it was made; d: its client
-- left, a grant made for it goes back), the lease id it was to get (a grant this instance
-- made for it but never delivered: a reply that came after the client left)
function ops.cancel()
  local wid, why, mylid = ARGV[A], ARGV[A + 1], ARGV[A + 2] or ''
  local kg = H .. 'g:' .. INST
  local ml = why == 'd' and M and mylid ~= '' and redis.call('HEXISTS', KW, wid) == 0 and
             redis.call('HEXISTS', kg, wid) == 0 and (lget(mylid) or MU.lease(mylid))
  if ml then
    lease_end(mylid, ACT.RELEASED, not ml.parts and ml or nil)
    admit()
    return reply(0)
  end
  local rec = M and redis.call('HGET', KW, wid)
  if rec then
    local w = wunpack(rec)
    if w.kind == 'm' then
      MU.leave(wid) -- (from every line)
    else
      unqueue(wid, w, true)
    end
    if why == 't' then
      act(ACT.FAIL, wid, INST, '', nil, MSG.WAITER_TIMED_OUT)
    end
    admit()
  else
    local g = redis.call('HGET', kg, wid)
    local lid = GRANTED[wid]
    if g then
      redis.call('HDEL', kg, wid)
      local a = fields(g) -- stem, type, lease id, extra, the lease's fields
      if a[2] == ACT.GRANTED_S then
        lid = a[3]
        if why == 't' then
          local l = {w = tonumber(a[5]), f = tonumber(a[6]), ttl = tonumber(a[7]),
                     acq = tonumber(a[8]), exp = tonumber(a[9]), owner = a[10] or '',
                     idem = a[11] or ''}
          act(ACT.GRANTED + P.ACT_COLLECTED, wid, INST, lid, l, a[4])
          lid = nil
        end
      elseif why == 't' then
        act(a[2] + P.ACT_COLLECTED, wid, INST, a[3], nil, a[4])
      end
    end
    if lid and why == 'd' and M then
      lease_end(lid, ACT.RELEASED)
      admit()
    elseif not g and not lid and why == 't' then
      granted_unseen(wid, mylid)
    end
  end
  return reply(0)
end

-- release_lid: a grant this instance could not deliver (its client left): lease id
-- drop_lease (KEYS[1] is sema:id:LID, like a release): a grant this instance could not
-- deliver (its client left, it was not confirmed) goes back, whoever's token took it; a lease
-- that has ended already is left as it is.
function ops.drop_lease()
  lease_end(LID, ACT.RELEASED, LEASE)
  admit()
  return reply(0)
end

-- ---- several semaphores at once, all or nothing (docs/semantics.md) ----
-- A request on several semaphores has a place in each one's line: a waiter record in each :w
-- (kind 'm', with the weight of its part there) under one waiter id, and sema:mu:<waiter id>
-- lists its parts (weight and stem each, in the request's order). It is granted when it is the
-- head of every one of its lines and fits in every one, and holds nothing until then. Its
-- lease's id key holds 'm', the lease's times and strings (MREC), then each part's weight,
-- fence and stem; every semaphore's :x holds the lease by its expiry, so whichever of them
-- finds it due ends it on all. One call touches them all: MU.go makes another of them the
-- call's current semaphore (each row is loaded once per call, and keeps its own acts); before
-- the call answers, MU.finish admits the lines that moved, then writes each row, its due time
-- and its events as answer() and publish() do for the call's own. Beside limits (tenants, a
-- rate) a request is next on a semaphore as the limits section says (LH.designated: it may
-- hold the turn there, LIM.res), its tenant's units count on each, and it takes each one's
-- tokens; it then joins every line first and is admitted from there (MU.enter).
local MREC = '<dddHc0Hc0Hc0' -- (after the 'm')

-- Waiter w's kind as views say it (a part of a ticket on several: no instance waits for it).
function MU.kind(w)
  return w.kind == 'm' and w.inst == '' and '4' or MU.KIND[w.kind] or '0'
end

-- Make `stem` the current semaphore: its row (nil when there is none).
function MU.go(stem)
  if stem == S then
    return M
  end
  local cx = MU.cx
  if not cx then
    cx = {}
    MU.cx, MU.first, MU.list, MU.need = cx, S, {S}, {}
  end
  cx[S] = {M, DUE0, ACTS, LIM, LIM and LH.ctx()}
  keys_of(stem)
  local c = cx[stem]
  if c then
    M, DUE0, ACTS, LIM = c[1], c[2], c[3], c[4]
    if LIM then
      LH.setctx(c[5])
    end
  else
    ACTS = NONE
    M = mload()
    if not M then
      LIM = nil
    end
    DUE0 = M and M.due or -2
    MU.list[#MU.list + 1] = stem
  end
  return M
end

-- Its line moved (units back, a head gone): admission runs there before the call answers.
function MU.moved(stem)
  if MU.cx then
    MU.need[stem] = true
  end
end

-- Parts from position i of v: {w, s} each (and f when `fenced`).
function MU.parts(v, i, fenced)
  local out = {}
  while i <= #v do
    local p = {}
    if fenced then
      p.w, p.f, p.s, i = struct.unpack('<ddHc0', v, i)
    else
      p.w, p.s, i = struct.unpack('<dHc0', v, i)
    end
    out[#out + 1] = p
  end
  return out
end

-- The live lease on several semaphores `lid`, or nil.
function MU.lease(lid)
  local v = redis.call('GET', H .. 'id:' .. lid)
  return v and string.byte(v, 1) == 109 and MU.lparse(v) or nil
end

function MU.waiting(wid)
  local p = MU.wc[wid]
  if p == nil then
    local v = redis.call('GET', H .. 'mu:' .. wid)
    p = v and MU.parts(v, 1, false) or false
    MU.wc[wid], MU.used = p, true
  end
  return p or nil
end

-- Request wid waits no more: its parts go.
function MU.gone(wid)
  redis.call('DEL', H .. 'mu:' .. wid)
  MU.changed(wid)
end

-- Request wid's lines or turns changed (MU.wc, MU.afc and MU.htc are read again).
function MU.changed(wid)
  MU.ver = MU.ver + 1
  if wid then
    MU.wc[wid] = nil
  end
end

function MU.lrec(l)
  local t = {'m', struct.pack(MREC, l.ttl, l.acq, l.exp, #l.owner, l.owner, #l.idem, l.idem,
                         #l.princ, l.princ)}
  for _, p in ipairs(l.parts) do
    t[#t + 1] = struct.pack('<ddHc0', p.w, p.f, #p.s, p.s)
  end
  return concat(t)
end

function MU.lparse(v)
  local ttl, acq, exp, owner, idem, princ, i = struct.unpack(MREC, v, 2)
  return {ttl = ttl, acq = acq, exp = exp, owner = owner, idem = idem, princ = princ,
          parts = MU.parts(v, i, true)}
end

-- The lease as its semaphore `stem` shows it: that part (mode 'm': a lease on several).
function MU.part(l, stem)
  for _, p in ipairs(l.parts) do
    if p.s == stem then
      return {w = p.w, f = p.f, ttl = l.ttl, acq = l.acq, exp = l.exp, owner = l.owner,
              idem = l.idem, mode = 'm', princ = l.princ, tn = l.tn}
    end
  end
  return nil
end

-- 'm' and the fences in the parts' order: the mode field of a granted request's outcome.
function MU.fences(l)
  local t = {'m'}
  for _, p in ipairs(l.parts) do
    t[#t + 1] = N(p.f)
  end
  return table.concat(t, ' ')
end

-- A lease's result: as on one semaphore (its first part's), then stem, weight, fence per part.
function MU.result(lid, l)
  if not l.tn then
    l.tn = LH.lease_tenant(lid) -- (kept by each of its semaphores with limits)
  end
  local r = lease_result(lid, MU.part(l, l.parts[1].s))
  for _, p in ipairs(l.parts) do
    r[#r + 1] = p.s
    r[#r + 1] = N(p.w)
    r[#r + 1] = N(p.f)
  end
  return r
end

-- The record of request w's part of weight `pw` on one semaphore.
function MU.wp(w, pw)
  local c = {}
  for k, x in pairs(w) do
    c[k] = x
  end
  c.w, c.sw = pw, N(pw)
  return c
end

-- The outcome of a parked request on several semaphores, as outcome() tells one (an own
-- request's in the call's reply, as a collected outcome: never a public event); `stem` its
-- first semaphore.
function MU.tell(typ, wid, w, lid, l, extra, stem)
  local here = S
  if w.inst == INST then
    if MU.cx then
      MU.go(MU.first)
    end
    act(typ + P.ACT_COLLECTED, wid, INST, lid, l, extra)
    MU.go(here)
    return
  end
  local rec = typ .. '\0' .. lid .. '\0' .. extra .. '\0' .. (l and lpack(l) or '')
  redis.call('HSET', H .. 'g:' .. w.inst, wid, stem .. '\0' .. rec)
  if WAKE == NONE then
    WAKE = {}
  end
  WAKE[w.inst] = true
end

-- Is request wid next on the current semaphore: its part heads the line, or (with limits)
-- is the one whose turn it is (LH.designated)?
function MU.next_here(wid)
  if not M then
    return false
  end
  if M.lim then
    return LH.designated(wid)
  end
  return redis.call('ZRANGE', KQ, '0', '0')[1] == wid
end

-- Do w units fit the current semaphore now: units, and tokens (short of tokens only, it is
-- due when its bucket has them)?
function MU.fits_here(w)
  if not M or w > M.avail or NOW < SAFE_AT then
    return false
  end
  return not M.lim or LH.has_tokens(w)
end

-- Request wid (w: its record on the current semaphore) is granted when it is next on every
-- one of its semaphores and fits in every one (emb_multi.c's emb__multi_try): true if so.
function MU.try(wid, w)
  local ok = MU.on_parts(wid, true, false, function()
    return MU.next_here(wid)
  end) and MU.on_parts(wid, true, false, function(p)
    return MU.fits_here(p.w)
  end)
  if ok then
    MU.grant(wid, w, MU.waiting(wid), true)
  end
  return ok
end

-- Whether test(part) holds on every one (`all`) or on some one (not `all`) of request wid's
-- parts, each with its semaphore made current in turn (but the current one's when
-- `others`); false when it waits no more. (It stops at the first answer that settles it.)
function MU.on_parts(wid, all, others, test)
  local parts, here = MU.waiting(wid), S
  if not parts then
    return false
  end
  local r = all
  for _, p in ipairs(parts) do
    if r == all and not (others and p.s == here) then
      MU.go(p.s)
      r = test(p) and true or false
    end
  end
  MU.go(here)
  return r
end

-- f(...) once while MU.ver stays, kept in memo[key].
function MU.memo(memo, key, f, ...)
  local c = memo[key]
  if c and c[1] == MU.ver then
    return c[2]
  end
  local v = f(...)
  memo[key], MU.used = {MU.ver, v}, true
  return v
end

-- Is the part of request wid on the current semaphore first in line there: the head (without
-- limits), or the first of its tenant and before any wait-idle (with)?
function MU.first_here(wid, tenant)
  if not M then
    return false
  end
  if M.lim then
    return LH.first(wid, tenant)
  end
  return redis.call('ZRANGE', KQ, '0', '0')[1] == wid
end

-- Is request wid first in line on every one of its semaphores (its part on the current one
-- is first of its tenant: the caller knows)? A tenant whose first waiter is not is passed
-- over by the turns.
function MU.all_first(wid, tenant)
  return MU.memo(MU.afc, wid .. '\0' .. S, MU.on_parts, wid, true, true, function()
    return MU.first_here(wid, tenant)
  end)
end

-- Does request wid hold the turn of one of its semaphores?
function MU.holds_turn(wid)
  return MU.memo(MU.htc, wid, MU.on_parts, wid, false, false, function()
    return M ~= nil and LIM ~= nil and LIM.res == wid
  end)
end

-- Request wid took its first turn: admission runs again on its other semaphores, where it
-- may take theirs.
function MU.moved_others(wid)
  for _, p in ipairs(MU.waiting(wid) or NONE) do
    if p.s ~= S then
      MU.moved(p.s)
    end
  end
end

-- Grant request w (waiter id wid; `waited`: parked in every line) its parts: one lease.
function MU.grant(wid, w, parts, waited)
  local here = S
  local l = {ttl = w.ttl, acq = NOW, exp = NOW + w.ttl, owner = w.owner, idem = w.idem,
             princ = w.princ, parts = parts, tn = w.tenant}
  local sexp = N(l.exp)
  if waited then
    -- the turns and the tokens first, on every line, while it is still in all of them
    for _, p in ipairs(parts) do
      MU.go(p.s)
      if M.lim then
        LH.take(wid, MU.wp(w, p.w))
      end
    end
  end
  for _, p in ipairs(parts) do
    MU.go(p.s)
    if waited then
      unqueue(wid, MU.wp(w, p.w))
      est_queue_grant(p.w)
    end
    p.f = next_fence()
    M.avail = M.avail - p.w
    M.held = M.held + p.w
    redis.call('ZADD', KX, sexp, w.lid)
    due_at(l.exp)
    granted()
    if M.lim then
      LH.hold(w.tenant, w.lid, p.w)
    end
    if M.nt > 0 then
      redis.call('ZADD', KH, nows(), w.lid)
    end
    act(ACT.GRANTED, '', '', w.lid, MU.part(l, p.s))
    MU.moved(p.s)
  end
  redis.call('SET', H .. 'id:' .. w.lid, MU.lrec(l))
  bump_horizon(l.exp)
  count('leases', '1')
  MU.go(parts[1].s)
  if w.idem ~= '' then
    redis.call('HSET', KI, w.idem, 'L' .. w.lid)
  end
  if waited and w.inst == '' then
    MU.gone(wid)
    MU.tk_granted(wid, w.lid) -- a ticket: its record says so, its holder reads it
  elseif waited and wid == MU.self then
    MU.gone(wid) -- (the caller's own: its reply has the lease)
    MU.self_lease = l
  elseif waited then
    MU.gone(wid)
    if OP == 'collect' or OP == 'cancel' then
      if GRANTED == NONE then
        GRANTED = {}
      end
      GRANTED[wid] = w.lid
    end
    MU.tell(ACT.GRANTED, wid, w, w.lid, MU.part(l, parts[1].s), MU.fences(l), S)
  end
  MU.go(here)
  return l
end

-- Request wid leaves every line without a grant (but the line of `except`, which the caller
-- empties; `quiet`: a try that was never queued, no event); its first semaphore's stem.
function MU.leave(wid, except, quiet)
  local parts, here = MU.waiting(wid), S
  if not parts then
    return here
  end
  for _, p in ipairs(parts) do
    if p.s ~= except and MU.go(p.s) then
      local rec = redis.call('HGET', KW, wid)
      if rec then
        unqueue(wid, wunpack(rec), not quiet)
      end
      MU.moved(p.s)
    end
  end
  MU.gone(wid)
  MU.go(here)
  return parts[1].s
end

-- End lease lid on several semaphores (v: its id key's value). Deleting one of them (the
-- current one) revokes it on the others.
function MU.lease_end(lid, why, v)
  local l, here = MU.lparse(v), S
  for _, p in ipairs(l.parts) do
    if MU.go(p.s) then
      redis.call('ZREM', KX, lid)
      M.avail = M.avail + p.w
      M.held = M.held - p.w
      if M.lim then
        l.tn = LH.unhold(lid, p.w)
      end
      if M.nt > 0 then
        redis.call('ZREM', KH, lid)
        est_hold(NOW - l.acq)
      end
      local typ = why
      if why == ACT.DELETED and p.s ~= here then
        typ = ACT.REVOKED
      end
      if typ ~= ACT.DELETED then
        act(typ, '', '', lid, MU.part(l, p.s))
      end
      if typ == ACT.REVOKED then
        next_fence() -- a fenced write with the old token now loses, on every one
      end
      MU.moved(p.s)
    end
  end
  local tomb = 'T' .. ENDED[why]
  if OP == 'lease_release' and lid == LID then
    tomb = tomb .. RID -- a retry of this very release finds it done (see main)
  end
  redis.call('SET', H .. 'id:' .. lid, tomb, 'PX', P.TOMB_TTL_MS_S)
  if l.idem ~= '' and MU.go(l.parts[1].s) and redis.call('HGET', KI, l.idem) == 'L' .. lid then
    redis.call('HDEL', KI, l.idem)
  end
  count('leases', '-1')
  if MU.go(l.parts[1].s) and M.nt > 0 then
    tk_lease_gone(lid, why) -- (a ticket's record lives with its first semaphore)
  end
  MU.go(here)
  return MU.part(l, here) or MU.part(l, l.parts[1].s)
end

-- The call's other semaphores: their lines admitted (a bounded number of times: past it, they
-- are due now and the sweep goes on), then their rows, due times and events written.
function MU.finish()
  local n = 0
  local more = true
  while more and n < 4 * HK_MAX do
    more = false
    for _, s in ipairs(MU.list) do
      if MU.need[s] then
        MU.need[s] = nil
        more = true
        n = n + 1
        if MU.go(s) then
          admit()
        end
      end
    end
  end
  for s, _ in pairs(MU.need) do
    if MU.go(s) then
      due_at(NOW)
    end
  end
  for i = 2, #MU.list do
    if MU.go(MU.list[i]) then
      MU.settle()
    end
  end
  MU.go(MU.first)
  MU.cx = nil
end

-- The current semaphore (not the call's own): what answer() and publish() do for that one.
function MU.settle()
  LOG = M.ev ~= 0 and redis.call('HGET', KS, 'log') or nil
  if M.due < 0 or MORE then
    M.due = next_due()
  end
  local d = M.due
  msave()
  if d ~= DUE0 and not (DUE0 == -2 and d == 0) then
    SP.due_write(d)
  end
  MU.log('') -- (every instance takes them from the message, this one too: no reply has them)
end

-- A retry with a known Idempotency-Key (in the first semaphore's :i): the lease it names,
-- or the first attempt's places, taken over.
function MU.idem(wid, w, parts, wait)
  local v = redis.call('HGET', KI, w.idem)
  if not v then
    return nil
  end
  local kind, ref = string.sub(v, 1, 1), string.sub(v, 2)
  if kind == 'T' then
    return refuse(MSG.KEY_NAMES_TICKET)
  end
  local have
  if kind == 'L' then
    local t = redis.call('GET', H .. 'id:' .. ref)
    if not t or string.byte(t, 1) ~= 109 then
      return t and string.byte(t, 1) == 108 and refuse(MSG.KEY_OTHER_PARTS) or nil
    end
    have = MU.lparse(t)
  else
    local rec = redis.call('HGET', KW, ref)
    if not rec then
      return nil
    end
    have = wunpack(rec)
    have.parts = have.kind == 'm' and MU.waiting(ref) or {}
  end
  if not allowed(have.princ) then
    return refuse(MSG.KEY_OTHER_TOKEN)
  end
  local same = #have.parts == #parts and
               (kind == 'L' and LH.lease_tenant(ref) or have.tenant) == w.tenant
  for i = 1, #parts do
    same = same and have.parts[i].s == parts[i].s and have.parts[i].w == parts[i].w
  end
  if not same then
    return refuse(MSG.KEY_OTHER_PARTS)
  end
  if kind == 'L' then
    return reply(0, MU.result(ref, have))
  end
  if not wait then
    return refuse(MSG.NOT_AVAILABLE)
  end
  if not redis.call('ZSCORE', H .. 'inst', INST) then
    return answer(P.ST_GONE_S, '0', nil) -- this instance was taken for dead
  end
  -- the retry takes the first attempt's places: same positions, its own instance
  local old, first = wunpack(redis.call('HGET', KW, ref)), S
  for _, p in ipairs(parts) do
    MU.go(p.s)
    local score = redis.call('ZSCORE', KQ, ref)
    redis.call('ZREM', KQ, ref)
    redis.call('HDEL', KW, ref)
    waiter_out(old.inst)
    waiter_in(INST)
    local c = MU.wp(old, p.w)
    c.inst, c.lid, c.ttl, c.sttl, c.owner = INST, w.lid, w.ttl, w.sttl, w.owner
    redis.call('ZADD', KQ, score, wid)
    redis.call('HSET', KW, wid, wpack(c))
    if M.lim then
      LH.replace(ref, wid, c, score)
    end
  end
  MU.go(first)
  redis.call('RENAME', H .. 'mu:' .. ref, H .. 'mu:' .. wid)
  MU.changed(ref)
  MU.changed(wid)
  redis.call('HSET', KI, w.idem, 'W' .. wid)
  MU.tell(ACT.FAIL, ref, old, '', nil, MSG.WAITER_REPLACED, first)
  return reply(P.ST_PARKED)
end

-- Why the request (or ticket) on `parts` cannot be served at all (nil: it can): each of its
-- semaphores is loaded (and housekept) on the way; the call's own stays current.
function MU.check(parts)
  local first = S
  for i, p in ipairs(parts) do
    local m = MU.go(p.s)
    if not m then
      return MSG.NO_SEM_OF_SEVERAL
    end
    if p.w < 1 or p.w > m.cap then
      return MSG.BAD_WEIGHT
    end
    local heavy = m.lim and LH.too_heavy(p.w)
    if heavy then
      return heavy
    end
    if i > 1 then
      housekeep()
    end
  end
  MU.go(first)
  return nil
end

-- Whether `parts` fit now in lines nobody waits in, and whether a line is full (maxw).
function MU.fits(parts, maxw)
  local first, at_once, full = S, true, false
  for _, p in ipairs(parts) do
    local m = MU.go(p.s)
    at_once = at_once and m.nq == 0 and p.w <= m.avail
    full = full or (maxw > 0 and m.nq >= maxw)
  end
  MU.go(first)
  return at_once, full
end

-- One arrival of request wid (w: its record, a part's weight aside): the end of every line,
-- in one step.
-- (`quiet`: no event yet, MU.queued says it once the request waits; with limits, its tenant's
-- line on each semaphore that has them, which has room: MU.enter)
function MU.join(wid, w, parts, quiet)
  local first, pk = S, {}
  for i, p in ipairs(parts) do
    pk[i] = struct.pack('<dHc0', p.w, #p.s, p.s)
  end
  redis.call('SET', H .. 'mu:' .. wid, concat(pk))
  MU.changed(wid)
  for _, p in ipairs(parts) do
    MU.go(p.s)
    local c = MU.wp(w, p.w)
    M.seq = M.seq + 1
    if M.lim then
      LH.join(wid, c, M.seq)
    end
    redis.call('ZADD', KQ, N(M.seq), wid)
    redis.call('HSET', KW, wid, wpack(c))
    if w.inst ~= '' then
      waiter_in(w.inst)
    end
    M.nq = M.nq + 1
    M.wq = M.wq + p.w
    if not quiet then
      waiter_event(ACT.QUEUED, c)
    end
  end
  MU.go(first)
end

-- Request w, joined quietly, waits: each of its lines says so.
function MU.queued(w, parts)
  local first = S
  for _, p in ipairs(parts) do
    MU.go(p.s)
    waiter_event(ACT.QUEUED, MU.wp(w, p.w))
  end
  MU.go(first)
end

-- Whether a request naming `tenant` on `parts` meets limits: a tenant, or one of its
-- semaphores has them (each of them loaded by MU.check).
function MU.limited(parts, tenant)
  return tenant ~= '' or MU.any(parts, function(m)
    return m.lim
  end)
end

-- Whether test(row) holds on some semaphore of `parts`, each made current in turn (rows
-- loaded: MU.check); it stops at the first that does.
function MU.any(parts, test)
  local first, r = S, false
  for _, p in ipairs(parts) do
    r = r or (test(MU.go(p.s)) and true or false)
  end
  MU.go(first)
  return r
end

-- Whether a request of w's tenant that meets limits has room in every line (`full`: one of
-- them has the most waiters it may): nil, or the refusal.
function MU.room(w, parts, full)
  if full or MU.any(parts, function(m)
    return m.lim and not LH.room(w.tenant)
  end) then
    return refuse(MSG.TOO_MANY_WAITERS_OR_TENANTS)
  end
  return nil
end

-- A request naming a tenant gives each of its semaphores limits (those without: what holds
-- and waits there so far is the default tenant's).
function MU.tenant_limits(w, parts)
  MU.any(parts, function(m)
    if w.tenant ~= '' and not m.lim then
      LH.activate()
    end
  end)
end

-- A request (or a ticket: w.inst '') on several semaphores that meets limits joins every
-- line, and admission says whether it goes at once, as on the embedded back end
-- (emb__op_acquire_multi): its tenant has its place on each semaphore, which gets limits if it
-- had none (MU.room first). Granted to the caller: MU.self_lease.
function MU.enter(wid, w, parts)
  MU.tenant_limits(w, parts)
  MU.join(wid, w, parts, true)
  MU.self, MU.self_lease = wid, nil
  MU.try(wid, MU.wp(w, parts[1].w))
  MU.self = nil
end

-- acquire_multi (KEYS[1]: the first semaphore's stem): wait (0 try, 1 wait), ttl, lease id,
-- owner, idem, the limits (as acquire's), tenant, then each semaphore's stem and weight.
function ops.acquire_multi()
  local wait = ARGV[A] == '1'
  local w = {inst = INST, w = 0, kind = 'm', since = NOW, ttl = ARGV[A + 1] + 0,
             owner = ARGV[A + 3], idem = ARGV[A + 4], lid = ARGV[A + 2], mode = '0',
             princ = PRINC, sttl = ARGV[A + 1], tenant = ''}
  local wid, parts = RID, {}
  w.tenant = ARGV[A + 6] or ''
  for i = A + 7, #ARGV - 1, 2 do
    parts[#parts + 1] = {s = ARGV[i], w = ARGV[i + 1] + 0}
  end
  if NOW < SAFE_AT then
    return refuse(MSG.REDIS_STATE_LOST)
  end
  local bad = MU.check(parts)
  if bad then
    return refuse(bad)
  end
  if w.idem ~= '' then
    local r = MU.idem(wid, w, parts, wait)
    if r then
      return r
    end
  end
  local at_once, full = MU.fits(parts, tonumber(match(ARGV[A + 5], '^%d+ (%d+)') or '0'))
  if MU.limited(parts, w.tenant) then
    return MU.acquire_lim(wid, w, parts, wait, full)
  end
  if at_once then
    return reply(0, MU.result(w.lid, MU.grant(wid, w, parts, false)))
  end
  if not wait then
    return refuse(MSG.NOT_AVAILABLE)
  end
  if full then
    return refuse(MSG.TOO_MANY_WAITERS)
  end
  if not redis.call('ZSCORE', H .. 'inst', INST) then
    return answer(P.ST_GONE_S, '0', nil) -- this instance was taken for dead
  end
  MU.join(wid, w, parts)
  if w.idem ~= '' then
    redis.call('HSET', KI, w.idem, 'W' .. wid)
  end
  return reply(P.ST_PARKED)
end

-- Would request w be granted at once on joining its lines when nobody waits in any of them
-- (the turns then change nothing: LH.at_once)? If so, it has taken the tokens. Its tenant's
-- semaphores have limits first (MU.enter's).
function MU.at_once(w, parts)
  local first, ok = S, true
  MU.tenant_limits(w, parts)
  for _, p in ipairs(parts) do
    if ok and MU.go(p.s) then
      ok = M.nq == 0 and (M.lim and LH.fits_now(w.tenant, p.w) or
                          not M.lim and p.w <= M.avail and NOW >= SAFE_AT)
    end
  end
  for _, p in ipairs(ok and parts or NONE) do
    if MU.go(p.s).lim then
      LH.take_tokens(p.w)
    end
  end
  MU.go(first)
  return ok
end

-- acquire_multi where limits are: granted at once, or it waits (a try leaves without a trace).
function MU.acquire_lim(wid, w, parts, wait, full)
  if MU.at_once(w, parts) then
    return reply(0, MU.result(w.lid, MU.grant(wid, w, parts, false)))
  end
  if wait and not redis.call('ZSCORE', H .. 'inst', INST) then
    return answer(P.ST_GONE_S, '0', nil) -- this instance was taken for dead
  end
  local r = MU.room(w, parts, full)
  if r then
    return r
  end
  MU.enter(wid, w, parts)
  if MU.self_lease then
    return reply(0, MU.result(w.lid, MU.self_lease))
  end
  if not wait then
    MU.leave(wid, nil, true)
    return refuse(MSG.NOT_AVAILABLE)
  end
  MU.queued(w, parts)
  if w.idem ~= '' then
    redis.call('HSET', KI, w.idem, 'W' .. wid)
  end
  return reply(P.ST_PARKED)
end

-- A lease op on a lease on several semaphores (run: LID; v its id key's value).
function MU.lease_op(v)
  local l = MU.lparse(v)
  keys_of(l.parts[1].s)
  M = mload()
  DUE0 = M and M.due or -2
  if not M then
    return refuse(MSG.NO_LEASE)
  end
  if OP ~= 'drop_lease' and not allowed(l.princ) then
    return refuse(MSG.LEASE_OTHER_TOKEN)
  end
  if l.exp <= NOW and OP ~= 'lease_release' and OP ~= 'drop_lease' then
    MU.lease_end(LID, ACT.EXPIRED, v) -- its time came before any housekeeping ended it
    admit()
    return refuse(MSG.LEASE_EXPIRED)
  end
  if OP == 'lease_get' then
    return reply(0, MU.result(LID, l))
  end
  if OP == 'lease_renew' then
    l.ttl = tonumber(ARGV[A])
    l.exp = NOW + l.ttl
    redis.call('SET', H .. 'id:' .. LID, MU.lrec(l))
    local sexp = N(l.exp)
    for _, p in ipairs(l.parts) do
      if MU.go(p.s) then
        redis.call('ZADD', KX, sexp, LID)
        due_at(l.exp)
      end
    end
    MU.go(l.parts[1].s)
    bump_horizon(l.exp)
    return reply(0, MU.result(LID, l))
  end
  REBUILT = OP == 'lease_release'
  MU.lease_end(LID, OP == 'lease_revoke' and ACT.REVOKED or ACT.RELEASED, v)
  admit()
  return reply(0)
end

-- ---- limits: tenants served in turn and a rate (docs/semantics.md) ----
-- A semaphore has limits while it has a tenant_max or a rate, or while a request naming a
-- tenant holds or waits there; then its row is longer, the limits' numbers following its
-- own (the plain short paths read only its own, and tell a row with limits by its length,
-- the limits' short paths read the rest with it). An uncontended acquire
-- and its release keep the limits in short (LH.short_*: the tenant's record, the bucket, the
-- lease's tenant); anything else takes the general path. The state, under the semaphore's
-- hash tag:
--   the row (:m), after its own numbers: the limits' numbers packed with struct (LNUM:
--        read with the row, none parsed or formatted): tm, rate, burst (0: none); tok and
--        tms (the bucket: millionths of a unit at Redis's ms tms); turn (whether the turn of
--        the tenant served last goes on); nidle (wait-idles); ntn (tenants)
--   :L   ring (the tenants with waiters in turn order), last (the tenant served last) and
--        res (the request on several semaphores that holds the turn here: its waiter id)
--   :tn  tenant -> held, waiting, waiting weight, deficit, packed (TNUM) (while it holds
--        or waits); and lease id -> tenant, for the leases of a named tenant (a tenant's
--        field starts with '=', a lease id never does: one hash, so a grant writes both in
--        one HSET, and a release reads both, or ends both, in one command)
--   :tq<tenant>  its waiters by place (FIFO within a tenant)
-- A tenant is named '=' .. its name inside ('=' alone: the requests naming none), so no name
-- is empty. Admission (LH.admit) is the embedded back end's (emb_limits.c) step for step.
do -- (its helpers are local to the section: the library's main chunk has room for 200)
local MICRO = 1000000 -- the bucket counts millionths of a unit (exact: burst <= 10^9)
local DEFICIT_MAX = 2 ^ 52
local KL, KTN
local LNUM, TNUM = '<dddddddd', '<dddd'
local LNUM_LEN = 64
local TN, TDIRTY, HEADS, IDLE_SEQ -- the tenants, those changed, their first waiters, the
-- place of the first wait-idle (false: not known yet), this call's

local function lim_keys()
  KL, KTN = S .. ':L', S .. ':tn'
end

-- A tenant: its units held, waiters, units waiting, deficit (packed in :tn: TNUM).
local function tn_parse(v)
  local held, nw, ww, def = struct.unpack(TNUM, v)
  return {held = held, nw = nw, ww = ww, def = def}
end
local function tn_pack(held, nw, ww, def)
  return struct.pack(TNUM, held, nw, ww, def)
end
-- TN reads a tenant from :tn when first named in a call; one that went this call is false.
local TN_LOAD = {__index = function(tn, name)
  local v = redis.call('HGET', KTN, name)
  local t = v and tn_parse(v) or false
  rawset(tn, name, t)
  return t
end}

-- The section's state of the current semaphore, kept aside while a call works on another of a
-- request's semaphores (MU.go), and put back.
LH.ctx = function()
  return {TN, TDIRTY, HEADS, IDLE_SEQ, KL, KTN}
end
LH.setctx = function(c)
  TN, TDIRTY, HEADS, IDLE_SEQ, KL, KTN = c[1], c[2], c[3], c[4], c[5], c[6]
end

-- (v: the row)
LH.load = function(v)
  lim_keys()
  local h = redis.call('HGETALL', KL)
  local L = {tm = 0, rate = 0, burst = 0, tok = 0, tms = NOW, turn = 0, nidle = 0, ntn = 0,
             ring = {}, rdue = 0, was = {}}
  if #v >= #ROW * 8 + LNUM_LEN then
    L.tm, L.rate, L.burst, L.tok, L.tms, L.turn, L.nidle, L.ntn =
      struct.unpack(LNUM, v, #ROW * 8 + 1)
  end
  for i = 1, #h, 2 do
    local k, v = h[i], h[i + 1]
    L.was[k] = v
    if k == 'ring' then
      L.ring = v ~= '' and fields(v) or {}
    elseif k == 'last' or k == 'res' then
      L[k] = v
    end
  end
  LIM, TN, TDIRTY, HEADS, IDLE_SEQ = L, setmetatable({}, TN_LOAD), {}, {}, false
end

local function lim_idle()
  return LIM.tm == 0 and LIM.rate == 0 and LIM.ntn == 0 and LIM.nidle == 0
end

-- The fields of :L, as strings (what changed since the load is written).
local function lim_fields(L)
  return {ring = concat(L.ring, '\0'), last = L.last, res = L.res}
end

-- Written back with the row (msave), which ends with what it returns: the limits' numbers
-- (nil: a semaphore whose limits are idle goes back to plain).
LH.save = function()
  for name, _ in pairs(TDIRTY) do
    local t = TN[name]
    if t then
      redis.call('HSET', KTN, name, tn_pack(t.held, t.nw, t.ww, t.def))
    else
      redis.call('HDEL', KTN, name)
    end
  end
  TDIRTY = {}
  if lim_idle() then
    redis.call('DEL', KL, KTN)
    M.lim, LIM = false, nil
    return nil
  end
  local was, set = LIM.was, {}
  for k, v in pairs(lim_fields(LIM)) do
    if was[k] ~= v then
      set[#set + 1] = k
      set[#set + 1] = v
      was[k] = v
    end
  end
  if #set > 0 then
    redis.call('HSET', KL, unpack(set))
  end
  for _, k in ipairs({'last', 'res'}) do
    if was[k] and not LIM[k] then
      redis.call('HDEL', KL, k)
      was[k] = nil
    end
  end
  return struct.pack(LNUM, LIM.tm, LIM.rate, LIM.burst, LIM.tok, LIM.tms, LIM.turn, LIM.nidle,
                     LIM.ntn)
end

-- Every tenant, read from Redis (those not read yet this call; not the leases' fields).
local function tn_all()
  local t = redis.call('HGETALL', KTN)
  for i = 1, #t, 2 do
    if sbyte(t[i], 1) == 61 and rawget(TN, t[i]) == nil then -- ('=')
      rawset(TN, t[i], tn_parse(t[i + 1]))
    end
  end
end

-- Every key of the limits goes (the semaphore is deleted).
LH.drop = function()
  tn_all()
  for name, _ in pairs(TN) do
    redis.call('DEL', S .. ':tq' .. name)
  end
  redis.call('DEL', KL, KTN)
  LIM = nil
end

local function tenant_of(name)
  return '=' .. (name or '')
end

-- Is there room for a waiter of tenant `name` (its tenant exists, or another may)?
LH.room = function(name)
  return TN[tenant_of(name)] or LIM.ntn < P.TENANTS_MAX
end

-- The tenant record of `name` (made when missing; nil past P.TENANTS_MAX of them).
local function tenant(name)
  local t = TN[name]
  if not t then
    if LIM.ntn >= P.TENANTS_MAX then
      return nil
    end
    t = {held = 0, nw = 0, ww = 0, def = 0}
    TN[name] = t
    LIM.ntn = LIM.ntn + 1
  end
  TDIRTY[name] = true
  return t
end

local function tenant_maybe_free(name, t)
  if t.nw == 0 and t.held <= 0 then
    TN[name] = false
    TDIRTY[name] = true
    LIM.ntn = LIM.ntn - 1
  end
end

local function ring_index(name)
  for i, x in ipairs(LIM.ring) do
    if x == name then
      return i
    end
  end
  return nil
end

-- t joins the turns: visited at the end of the round under way (just before the last served).
local function ring_join(name, t)
  t.def = 0
  local i = LIM.last and ring_index(LIM.last)
  table.insert(LIM.ring, i or #LIM.ring + 1, name)
end

local function ring_leave(name, t)
  local ring, i = LIM.ring, ring_index(name)
  if LIM.last == name then
    local prev = ring[i > 1 and i - 1 or #ring]
    LIM.last = prev ~= name and prev or nil
    LIM.turn = 0
  end
  table.remove(ring, i)
  t.def = 0
end

-- A waiter joins its tenant's line (false: no room for another tenant).
LH.join = function(wid, w, seq)
  if w.kind == 'i' then
    LIM.nidle = LIM.nidle + 1
    IDLE_SEQ = false
    return true
  end
  local name = tenant_of(w.tenant)
  local t = tenant(name)
  if not t then
    return false
  end
  if t.nw == 0 then
    ring_join(name, t)
  end
  redis.call('ZADD', S .. ':tq' .. name, N(seq), wid)
  t.nw, t.ww = t.nw + 1, t.ww + w.w
  HEADS[name] = nil
  return true
end

LH.leave = function(wid, w)
  if w.kind == 'i' then
    LIM.nidle = LIM.nidle - 1
    IDLE_SEQ = false
    return
  end
  if LIM.res == wid then
    LIM.res = nil -- (the turn it held goes on)
  end
  local name = tenant_of(w.tenant)
  local t = TN[name]
  if not t then
    return
  end
  TDIRTY[name] = true
  redis.call('ZREM', S .. ':tq' .. name, wid)
  t.nw, t.ww = t.nw - 1, t.ww - w.w
  HEADS[name] = nil
  if t.nw == 0 then
    ring_leave(name, t)
  end
  tenant_maybe_free(name, t)
end

-- A retry with its Idempotency-Key took over the place of waiter `old` (same tenant).
LH.replace = function(old, wid, w, seq)
  local k = S .. ':tq' .. tenant_of(w.tenant)
  if w.kind ~= 'i' and redis.call('ZREM', k, old) == 1 then
    redis.call('ZADD', k, N(seq), wid)
    HEADS[tenant_of(w.tenant)] = nil
  end
  if LIM.res == old then
    LIM.res = wid
  end
  MU.changed()
end

-- A grant counts for its tenant (the lease's tenant is kept for its end).
LH.hold = function(name, lid, w)
  local t = tenant(tenant_of(name))
  if t then
    t.held = t.held + w
  end
  if name and name ~= '' then
    redis.call('HSET', KTN, lid, name)
  end
end

LH.unhold = function(lid, w)
  local tn = redis.call('HGET', KTN, lid)
  if tn then
    redis.call('HDEL', KTN, lid)
  end
  local name = tenant_of(tn or '')
  local t = TN[name]
  if t then
    TDIRTY[name] = true
    t.held = t.held - w
    tenant_maybe_free(name, t)
  end
  return tn or ''
end

-- The tenant of a lease of this semaphore ('' for none).
LH.lease_tenant = function(lid)
  return LIM and redis.call('HGET', KTN, lid) or ''
end

-- The semaphore gets limits: what holds and waits so far is the default tenant's.
LH.activate = function()
  MU.changed() -- (its first waiters are now the first of each tenant)
  M.lim, M.ev = true, 1
  lim_keys()
  LIM = {tm = 0, rate = 0, burst = 0, tok = 0, tms = NOW, turn = 0, nidle = 0, ntn = 0,
         ring = {}, rdue = 0, was = {}}
  TN, TDIRTY, HEADS, IDLE_SEQ = {}, {}, {}, false
  if M.held > 0 then
    tenant('=').held = M.held
  end
  if M.nq > 0 then
    local q = redis.call('ZRANGE', KQ, '0', '-1', 'WITHSCORES')
    for i = 1, #q, 2 do
      local rec = redis.call('HGET', KW, q[i])
      if rec then
        LH.join(q[i], wunpack(rec), q[i + 1])
      end
    end
  end
end

-- ---- the bucket ----
local function tokens_at(now)
  if now <= LIM.tms then
    return LIM.tok
  end
  local cap = LIM.burst * MICRO
  local v = LIM.tok + (now - LIM.tms) * LIM.rate * 1000
  return v >= cap and cap or v
end

local function refill()
  if LIM.rate ~= 0 then
    LIM.tok = tokens_at(NOW)
    LIM.tms = NOW
  end
end

-- The waiter next lacks tokens: the semaphore is due when the bucket has them.
local function rate_wait(w)
  local per_ms = LIM.rate * 1000
  local due = LIM.tms + math.ceil((w * MICRO - LIM.tok) / per_ms)
  LIM.rdue = due
  due_at(due)
end

LH.next_due = function(d)
  if LIM and LIM.rdue > 0 and (d == 0 or LIM.rdue < d) then
    return LIM.rdue
  end
  return d
end

-- ---- who is next ----
-- A tenant's first waiter: {wid, w, seq, rec}, or false.
local function head(name)
  local h = HEADS[name]
  if h == nil then
    h = false
    local x = redis.call('ZRANGE', S .. ':tq' .. name, '0', '0', 'WITHSCORES')
    if #x > 0 then
      local rec = redis.call('HGET', KW, x[1])
      if rec then
        local w = wunpack(rec)
        h = {wid = x[1], w = w.w, seq = tonumber(x[2]), rec = w}
      end
    end
    HEADS[name] = h
  end
  return h
end

-- The place of the first wait-idle in the queue (0: none), and whether it is the head.
local function idle_seq()
  if LIM.nidle == 0 then
    return 0, false
  end
  if not IDLE_SEQ then
    IDLE_SEQ = {0, false}
    local q = redis.call('ZRANGE', KQ, '0', '-1', 'WITHSCORES')
    for i = 1, #q, 2 do
      local rec = redis.call('HGET', KW, q[i])
      if rec and wunpack(rec).kind == 'i' then
        IDLE_SEQ = {tonumber(q[i + 1]), i == 1, q[i], wunpack(rec)}
        break
      end
    end
  end
  return IDLE_SEQ[1], IDLE_SEQ[2]
end

-- A tenant is passed over while its first waiter would take it above tenant_max, came after a
-- parked wait-idle, or is a request on several semaphores not yet first of its tenant on all
-- of them.
local function eligible(t, h, idle)
  if not h or (idle ~= 0 and h.seq > idle) or (LIM.tm ~= 0 and t.held + h.w > LIM.tm) then
    return false
  end
  return h.rec.kind ~= 'm' or MU.all_first(h.wid, h.rec.tenant)
end

-- The round robin's choice among the tenants' first waiters: the first whose deficit covers
-- its weight in the visits to come (each visit adds one unit), and the pick {name, at, k}.
local function drr_choice(idle)
  local ring = LIM.ring
  local n = #ring
  if n == 0 then
    return nil
  end
  local last = LIM.last
  if last and LIM.turn == 1 then
    local t, h = TN[last], head(last)
    if eligible(t, h, idle) and t.def >= h.w then
      return h, {name = last, at = 0, k = 0}
    end
  end
  local s = last and ring_index(last) or n
  local k = 0
  for j = 1, n do
    local nm = ring[(s + j - 1) % n + 1]
    if eligible(TN[nm], head(nm), idle) then
      k = k + 1
    end
  end
  local best, pk, i = nil, nil, 0
  for j = 1, n do
    local nm = ring[(s + j - 1) % n + 1]
    local t, h = TN[nm], head(nm)
    if eligible(t, h, idle) then
      i = i + 1
      local short = h.w - t.def
      local at = ((short > 1 and short or 1) - 1) * k + i
      if not best or at < pk.at then
        best, pk = h, {name = nm, at = at, k = k}
      end
    end
  end
  return best, pk
end

-- h is granted by the round robin: the tenants visited on the way get their units of
-- deficit, h's tenant pays its weight, and its turn may go on.
local function drr_commit(pk, h, idle)
  local ring = LIM.ring
  local n = #ring
  if pk.at ~= 0 then
    local s = LIM.last and ring_index(LIM.last) or n
    local i = 0
    for j = 1, n do
      local nm = ring[(s + j - 1) % n + 1]
      local t = TN[nm]
      if eligible(t, head(nm), idle) then
        i = i + 1
        if pk.at >= i then
          t.def = math.min(DEFICIT_MAX, t.def + floor((pk.at - i) / pk.k) + 1)
          TDIRTY[nm] = true
        end
      end
    end
  end
  local t = TN[pk.name]
  t.def = t.def - h.w
  TDIRTY[pk.name] = true
  LIM.last, LIM.turn = pk.name, 1
end

-- A grant of h out of the round robin's turn (a request on several semaphores that holds this
-- semaphore's turn): its tenant pays for it all the same.
LH.drr_charge = function(h)
  local name = tenant_of(h.rec.tenant)
  local t = TN[name]
  t.def = math.max(-DEFICIT_MAX, t.def - h.w)
  TDIRTY[name] = true
end

-- h, who is next, is granted here: it takes its tokens, and the round robin accounts for it
-- (pk: the round robin's pick, when h is known to be it).
LH.take_here = function(h, pk, idle)
  if LIM.rate ~= 0 then
    LIM.tok = LIM.tok - h.w * MICRO
  end
  if not pk then
    local d
    d, pk = drr_choice(idle)
    if not (d and d.wid == h.wid) then
      pk = nil
    end
  end
  if pk then
    drr_commit(pk, h, idle)
  else
    LH.drr_charge(h)
  end
end

-- The earlier arrival of two waiters here (either may be nil).
LH.earliest = function(a, b)
  if not a or (b and b.seq < a.seq) then
    return b
  end
  return a
end

-- The part holding this semaphore's turn as a head {wid, w, seq, rec}, or nil.
LH.res_head = function()
  local wid = LIM.res
  local rec = redis.call('HGET', KW, wid)
  local seq = rec and redis.call('ZSCORE', KQ, wid)
  if not seq then
    LIM.res = nil
    MU.changed()
    return nil
  end
  local w = wunpack(rec)
  return {wid = wid, w = w.w, seq = tonumber(seq), rec = w}
end

-- The earliest of the tenants' first waiters here that is a request on several semaphores
-- holding the turn of one of them (it may take this one's), or nil.
LH.earliest_reserving = function(idle)
  local best
  for _, nm in ipairs(LIM.ring) do
    local h = head(nm)
    if h and h.rec.kind == 'm' and (not best or h.seq < best.seq) and
       eligible(TN[nm], h, idle) and MU.holds_turn(h.wid) then
      best = h
    end
  end
  return best
end

-- Part h takes this semaphore's turn. A request that now holds its first turn may take those
-- of its other semaphores: their admission runs again (before the call answers).
LH.reserve = function(h)
  if LIM.res == h.wid then
    return
  end
  local had = MU.holds_turn(h.wid)
  LIM.res = h.wid
  MU.changed()
  if not had then
    MU.moved_others(h.wid)
  end
end

-- Who is next here (emb_limits.c's designate_lim): the earliest of the part holding the turn,
-- the earliest part of a request holding another of its turns, and the round robin's choice
-- (pk, when it is the one); nil: nobody can be served now. (The caller looked for a wait-idle
-- at the head.)
LH.designate = function(idle)
  local d, pk = drr_choice(idle)
  local held = LH.earliest(LIM.res and LH.res_head(), LH.earliest_reserving(idle))
  local best = LH.earliest(held, d)
  if not (best and d and best.wid == d.wid) then
    pk = nil
  end
  if best and best.rec.kind == 'm' then
    LH.reserve(best)
  end
  return best, pk
end

-- Is the part wid of a request on several semaphores the one next here?
LH.designated = function(wid)
  refill()
  local idle, idle_head = idle_seq()
  if M.nq == 0 or idle_head then
    return false
  end
  local h = LH.designate(idle)
  return h ~= nil and h.wid == wid
end

-- The part w (waiter wid) of a request on several semaphores, next here, is granted.
LH.take = function(wid, w)
  refill()
  LH.take_here({wid = wid, w = w.w, rec = w}, nil, (idle_seq()))
end

-- Has the bucket w tokens now? If not, the semaphore is due when it has.
LH.has_tokens = function(w)
  refill()
  if LIM.rate ~= 0 and LIM.tok < w * MICRO then
    rate_wait(w)
    return false
  end
  return true
end

-- Is waiter wid the first of its tenant here, and before any wait-idle?
LH.first = function(wid, tenant)
  local h = head(tenant_of(tenant))
  if not h or h.wid ~= wid then
    return false
  end
  local idle = idle_seq()
  return idle == 0 or h.seq < idle
end

-- Admission on a semaphore with limits: grant who is next while it fits (units and tokens).
LH.admit = function()
  LIM.rdue = 0
  local n = 0
  while n < HK_MAX do
    refill()
    local idle, idle_head = idle_seq()
    if idle_head then
      if M.avail < M.cap then
        return
      end
      local wid, w = IDLE_SEQ[3], IDLE_SEQ[4]
      unqueue(wid, w, true)
      outcome(ACT.IDLE, wid, w, '', nil, '')
    else
      local h, pk = LH.designate(idle)
      if not h then
        return
      end
      if h.rec.kind == 'm' then
        if not MU.try(h.wid, h.rec) then
          return -- (it holds this line until it can go on every one of its semaphores)
        end
      else
        if h.w > M.avail or NOW < SAFE_AT then
          return
        end
        if LIM.rate ~= 0 and LIM.tok < h.w * MICRO then
          return rate_wait(h.w)
        end
        LH.take_here(h, pk, idle)
        local w = h.rec
        unqueue(h.wid, w)
        est_queue_grant(w.w)
        if w.kind == 't' then
          tk_admit(h.wid)
        elseif h.wid == LH.self_wid then
          local own = OWN
          LH.self_lease = grant(w, w.lid, h.wid)
          OWN = own -- (the caller's own grant completes no parked request)
        else
          grant(w, w.lid, h.wid)
        end
      end
    end
    n = n + 1
  end
  MORE = true
end

-- Would an acquire of w be granted at once on joining a line where nobody waits (the round
-- robin's turns then change nothing)? If so, it takes its tokens.
LH.at_once = function(w)
  if not LH.fits_now(w.tenant, w.w) then
    return false
  end
  LH.take_tokens(w.w)
  return true
end

-- Would weight wt of `tenant` be granted at once here (LH.at_once), tokens aside?
LH.fits_now = function(tenant, wt)
  if M.nq ~= 0 or wt > M.avail or NOW < SAFE_AT or not LH.room(tenant) then
    return false
  end
  local t = TN[tenant_of(tenant)]
  if LIM.tm ~= 0 and (t and t.held or 0) + wt > LIM.tm then
    return false
  end
  refill()
  return LIM.rate == 0 or LIM.tok >= wt * MICRO
end

LH.take_tokens = function(wt)
  if LIM.rate ~= 0 then
    LIM.tok = LIM.tok - wt * MICRO
  end
end

-- A weight the limits can never grant (a message id), or nil.
LH.too_heavy = function(w)
  if not LIM then
    return nil
  end
  if LIM.tm ~= 0 and w > LIM.tm then
    return MSG.ABOVE_TENANT_MAX
  end
  if LIM.rate ~= 0 and w > LIM.burst then
    return MSG.ABOVE_RATE_BURST
  end
  return nil
end

-- The limits a PUT or a resize names (RS_LIM_MAP: which, tenant_max, rate, burst from
-- ARGV[i]) over those the semaphore has (a PUT: over none): tm, rate, burst, or nil and a
-- message id.
LH.wanted = function(i, put)
  local tm, rate, burst = 0, 0, 0
  if LIM and not put then
    tm, rate, burst = LIM.tm, LIM.rate, LIM.burst
  end
  local which = tonumber(ARGV[i] or '0')
  local old_rate = rate
  if which % 2 == 1 then
    tm = tonumber(ARGV[i + 1])
  end
  if floor(which / 2) % 2 == 1 then
    rate = tonumber(ARGV[i + 2])
    if rate == 0 then
      burst = 0
    elseif old_rate == 0 and floor(which / 4) % 2 == 0 then
      burst = rate
    end
  end
  if floor(which / 4) % 2 == 1 then
    if rate == 0 then
      return nil, nil, nil, MSG.BURST_NEEDS_RATE
    end
    burst = tonumber(ARGV[i + 3])
  end
  return tm, rate, burst
end

-- Set the limits (0: none); a new rate starts with a full bucket.
LH.set = function(tm, rate, burst)
  if not LIM then
    if tm == 0 and rate == 0 then
      return
    end
    LH.activate()
  end
  local had_rate = LIM.rate ~= 0
  refill()
  LIM.tm, LIM.rate, LIM.burst = tm, rate, rate ~= 0 and burst or 0
  LIM.res = nil -- (its tenant may be capped now: the turn is chosen again)
  MU.changed()
  if rate == 0 then
    LIM.tok = 0
  elseif not had_rate or LIM.tok > LIM.burst * MICRO then
    LIM.tok = LIM.burst * MICRO
  end
  LIM.tms = NOW
end

-- The limits in a view: tm, rate, burst, tokens, then each tenant (name, held, waiting,
-- waiting weight; '' and '0' as the name of the default: name flag '0'), or nothing.
LH.view = function()
  if not LIM then
    return {}
  end
  local r = {N(LIM.tm), N(LIM.rate), N(LIM.burst),
             N(LIM.rate ~= 0 and floor(tokens_at(NOW) / MICRO) or 0)}
  tn_all()
  for name, t in pairs(TN) do
    if t then
      r[#r + 1] = string.sub(name, 2)
      r[#r + 1] = N(t.held)
      r[#r + 1] = N(t.nw)
      r[#r + 1] = N(t.ww)
    end
  end
  return r
end

-- ---- the short paths' part (acquire_at_once, release_at_once) ----
-- LH.ls: what LH.short_fits and LH.short_free read, for LH.short_take and LH.short_give.
LH.ls = {}

-- May weight wt of `tenant` (nil: none) be granted on stem k, whose row has limits and
-- nobody waiting? What LH.at_once asks (a tenant at its tenant_max, no room for another
-- tenant, tokens short: no), from the row (its limits' numbers) and the tenant's record alone.
-- Reads only.
LH.short_fits = function(k, wt, tenant, row)
  if #row < SP.rowlen + LNUM_LEN then
    return false
  end
  local tm, rate, burst, tok, tms, turn, nidle, ntn = sunpack(LNUM, row, SP.rowlen + 1)
  local name = tenant_of(tenant)
  local v = rcall('HGET', k .. ':tn', name)
  local s = LH.ls
  if v then
    s.t = tn_parse(v)
  elseif ntn >= P.TENANTS_MAX then
    return false
  else
    s.t, ntn = {held = 0, nw = 0, ww = 0, def = 0}, ntn + 1
  end
  if tm ~= 0 and s.t.held + wt > tm then
    return false
  end
  if rate ~= 0 then -- (refill and tokens_at's sums)
    if NOW > tms then
      local cap = burst * MICRO
      tok = tok + (NOW - tms) * rate * 1000
      if tok >= cap then
        tok = cap
      end
    end
    tms = NOW
    if tok < wt * MICRO then
      return false
    end
    tok = tok - wt * MICRO
  end
  s.name, s.new, s.rate = name, not v, rate
  s.n = {tm, rate, burst, tok, tms, turn, nidle, ntn}
  return true
end

-- The limits' numbers as LH.short_fits or LH.short_free left them, in the row (km) in place.
local function short_lnum(km, x)
  rcall('SETRANGE', km, SP.rowlen, spack(LNUM, x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8]))
end

-- The grant's part (after LH.short_fits): what LH.hold and the bucket's take write.
LH.short_take = function(k, km, lid, wt, tenant)
  local s = LH.ls
  local t = s.t
  local rec = tn_pack(t.held + wt, t.nw, t.ww, t.def)
  if tenant then
    rcall('HSET', k .. ':tn', s.name, rec, lid, tenant)
  else
    rcall('HSET', k .. ':tn', s.name, rec)
  end
  if s.rate ~= 0 or s.new then
    short_lnum(km, s.n)
  end
end

-- May the lease lid (weight w) of stem k, whose row has limits and nobody waiting, end in
-- short? Yes unless its tenant's record is missing or the limits would go idle (LH.save then
-- makes the row plain again: the general path's). Reads only.
LH.short_free = function(k, lid, w, row)
  local s = LH.ls
  local x = rcall('HMGET', k .. ':tn', lid, '=') -- (its tenant, and the default's record)
  s.tn = x[1]
  s.name = tenant_of(s.tn or '')
  local v = x[2]
  if s.tn then
    v = rcall('HGET', k .. ':tn', s.name)
  end
  if not v then
    return false
  end
  local t = tn_parse(v)
  t.held = t.held - w
  s.t, s.free = t, t.nw == 0 and t.held <= 0
  if s.free then
    if #row < SP.rowlen + LNUM_LEN then
      return false
    end
    local x = {sunpack(LNUM, row, SP.rowlen + 1)}
    x[8] = x[8] - 1
    if x[1] == 0 and x[2] == 0 and x[8] <= 0 and x[7] == 0 then
      return false
    end
    s.n = x
  end
  return true
end

-- The release's part (after LH.short_free): what LH.unhold writes.
LH.short_give = function(k, km, lid)
  local s = LH.ls
  if s.free then
    if s.tn then
      rcall('HDEL', k .. ':tn', s.name, lid)
    else
      rcall('HDEL', k .. ':tn', s.name)
    end
    short_lnum(km, s.n)
  else
    local t = s.t
    if s.tn then
      rcall('HDEL', k .. ':tn', lid)
    end
    rcall('HSET', k .. ':tn', s.name, tn_pack(t.held, t.nw, t.ww, t.def))
  end
end

end -- (the section "limits")

-- ---- tickets ----
-- A ticket is a waiter of kind 't' in the queue (:q, :w, its waiter id is the ticket id) that
-- no instance holds: its record is in :t, and while it waits (or its grant is not collected)
-- its keepalive deadline is in :k, which the housekeeping sweeps like lease expiries (the
-- row's due time includes it). A grant makes the lease at once (:tl maps it back to the
-- ticket); reading the ticket collects it. `sema:tk:ID` names the ticket's semaphore ('W' and
-- the stem), then, once it ended, why ('X' and a reason letter) for P.TOMB_TTL_MS. Every change
-- of a ticket's status is published on sema:tkt (its id), so an instance with a long-poll or a
-- stream on it reads it again at once; positions are read again every poll interval.
local TK_ENDED = {L = MSG.TICKET_LEFT, A = MSG.TICKET_ABANDONED, U = MSG.TICKET_UNCOLLECTED,
                  D = MSG.TICKET_DONE, X = MSG.TICKET_SEM_DELETED, F = MSG.TICKET_REFUSED}

-- status ('w' waiting, 'g' granted), weight, ttl, keepalive, owner, idempotency key, lease id,
-- principal, collected ('0', '1'), its place in the queue, the weight ahead then, the weight
-- that had left from places before it then (below)
local function tkpack(t)
  return table.concat({t.st, N(t.w), N(t.ttl), N(t.ka), t.owner, t.idem, t.lid, t.princ,
                       t.coll, N(t.seq), N(t.bw), N(t.bf), t.tenant or '', t.m or ''}, '\0')
end
local function tkunpack(s)
  local a = fields(s)
  return {st = a[1], w = tonumber(a[2]), ttl = tonumber(a[3]), ka = tonumber(a[4]),
          owner = a[5] or '', idem = a[6] or '', lid = a[7] or '', princ = a[8] or '',
          coll = a[9] or '0', seq = tonumber(a[10] or '0'), bw = tonumber(a[11] or '0'),
          bf = tonumber(a[12] or '0'), tenant = a[13] or '', m = a[14] or ''}
end
local function tk_get(tid)
  local rec = redis.call('HGET', KT, tid)
  return rec and tkunpack(rec) or nil
end
local function tk_changed(tid)
  redis.call(PUB, H .. 'tkt', tid)
end

-- The ticket's record goes, a tombstone says why (the caller ends its lease or its place).
local function tk_forget(tid, t, why)
  redis.call('HDEL', KT, tid)
  redis.call('ZREM', KK, tid)
  M.nt = M.nt - 1
  if M.nt == 0 then
    redis.call('DEL', KFW, KH) -- kept only while there are tickets
    if redis.call('EXISTS', KEST) == 1 then
      redis.call('HSET', KEST, 'gl', '0') -- no gap measured across a time without tickets
    end
  end
  count('tickets', -1)
  if t.idem ~= '' and redis.call('HGET', KI, t.idem) == 'T' .. tid then
    redis.call('HDEL', KI, t.idem)
  end
  redis.call('SET', H .. 'tk:' .. tid, 'X' .. why, 'PX', P.TOMB_TTL_MS_S)
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
    tk_forget(tid, t, why == ACT.DELETED and 'X' or 'D')
  end
end

-- End a ticket: out of line, or its lease released. The caller admits the queue.
local function tk_end(tid, t, why)
  if t.st == 'w' and t.m == '1' then
    MU.leave(tid)
    tk_forget(tid, t, why)
  elseif t.st == 'w' then
    local rec = redis.call('HGET', KW, tid)
    if rec then
      unqueue(tid, wunpack(rec), why ~= ACT.DELETED) -- ("deleted" says it for all)
    end
    tk_forget(tid, t, why)
  else
    redis.call('HDEL', KTL, t.lid)
    tk_forget(tid, t, why)
    lease_end(t.lid, ACT.RELEASED)
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
  if M.lim then
    LH.hold(t.tenant, t.lid, l.w)
  end
  redis.call('ZADD', KH, N(l.acq), t.lid)
  count('leases', 1)
  count('t_granted', 1)
  t.st, t.coll = 'g', '0'
  redis.call('HSET', KT, tid, tkpack(t))
  keepalive(tid, t)
  act(ACT.GRANTED, '', '', t.lid, l)
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
      if t.m == '1' then
        MU.leave(all[i], S) -- (its other lines)
      end
      redis.call('ZREM', KQ, all[i])
      redis.call('HDEL', KW, all[i])
      M.nq = M.nq - 1
      M.wq = M.wq - t.w
    end
    count('tickets', -1)
    redis.call('SET', H .. 'tk:' .. all[i], 'XX', 'PX', P.TOMB_TTL_MS_S)
    tk_changed(all[i])
  end
  redis.call('DEL', KT, KK, KTL, KFW, KH)
  M.nt = 0
end

-- Waiting tickets heavier than the new capacity can never be granted: they end.
tk_resize = function(cap)
  local all = redis.call('HGETALL', KT)
  for i = 1, #all, 2 do
    local t = tkunpack(all[i + 1])
    if t.st == 'w' and t.m ~= '1' and (t.w > cap or LH.too_heavy(t.w)) then
      tk_end(all[i], t, 'F')
    end
  end
end

-- ---- the wait estimate's samples: what the semaphore measured ----
-- The moving mean and variance of the time between grants from the queue per unit granted
-- (only while the queue stays non-empty), and the moving mean of hold times, in :est (ms, as
-- doubles; gl: the last grant's time in us, 0 when the queue emptied; ng, nh: samples taken),
-- folded in as be_est_fold() does for the embedded back end (P.EST_ALPHA). C makes the
-- estimate from them (be_estimate). Sampled while the semaphore has tickets, so a semaphore
-- without them pays nothing for it.
local EST_F = {'ng', 'gm', 'gv', 'gl', 'nh', 'hm'}
local function fold(mean, var, x, n)
  if n == 0 then
    return x, 0
  end
  local d = x - mean
  return mean + P.EST_ALPHA * d, (1 - P.EST_ALPHA) * (var + P.EST_ALPHA * d * d)
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
  if e.gl ~= 0 and w > 0 then
    local g, v = fold(e.gm, e.gv, (nowus() - e.gl) / 1000 / w, e.ng)
    redis.call('HSET', KEST, 'gm', fmt('%.17g', g), 'gv', fmt('%.17g', v), 'ng', N(e.ng + 1))
  end
  redis.call('HSET', KEST, 'gl', M.nq > 0 and N(nowus()) or '0')
end

est_hold = function(ms)
  if M.nt == 0 then
    return
  end
  local e = est_load()
  if ms < 0 then
    ms = 0
  end
  redis.call('HSET', KEST, 'hm', fmt('%.17g', (fold(e.hm, 0, ms, e.nh))), 'nh', N(e.nh + 1))
end

-- The samples C makes the estimate from (RS_TICKET_FIELD_MAP, UNITS to OLDEST_AGE_MS): the
-- units still to be granted, the capacity, the samples, and how long the oldest holder has
-- held (-1: none; :h holds the leases by grant time while there are tickets).
local function est_fields(units)
  local e = est_load()
  local age = '-1'
  local h = redis.call('ZRANGE', KH, '0', '0', 'WITHSCORES')
  if #h > 0 then
    age = N(NOW - tonumber(h[2]))
  end
  return N(units), N(M.cap), fmt('%.17g', e.gm), fmt('%.17g', e.gv), N(e.ng),
         fmt('%.17g', e.hm), N(e.nh), age
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

-- RS_TICKET_FIELD_MAP: created, id, status (1 waiting, 2 granted), weight, position, ahead
-- weight, keepalive, the estimate's samples (est_fields; zeros once granted), [the lease's
-- fields]
local function tk_view(tid, t, created)
  if t.m == '1' then
    return MU.tk_view(tid, t, created)
  end
  local r = {created and '1' or '0', tid, t.st == 'w' and '1' or '2', N(t.w), '0', '0', N(t.ka),
             '0', '0', '0', '0', '0', '0', '0', '-1', t.tenant}
  if t.st == 'w' then
    local ahead = t.bw - (fw_prefix(t.seq - 1) - t.bf)
    local avail = M.avail > 0 and M.avail or 0
    local need = ahead + t.w
    need = need > avail and need - avail or 1
    r[5] = N(tonumber(redis.call('ZRANK', KQ, tid) or 0) + 1)
    r[6] = N(ahead)
    r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15] = est_fields(need)
  else
    local l = lget(t.lid)
    if l then
      l.tn = t.tenant
      cat(r, lease_result(t.lid, l))
    end
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


-- A new ticket tid (t) counts here; its id key names this semaphore, its key the ticket.
function MU.tk_new(tid, t)
  if M.nt == 0 then
    -- the first ticket: the holders by grant time, for the estimate (kept while tickets live)
    for _, x in ipairs(lall()) do
      redis.call('ZADD', KH, N(x[2].acq), x[1])
    end
  end
  M.nt = M.nt + 1
  count('tickets', 1)
  count('t_created', 1)
  redis.call('SET', H .. 'tk:' .. tid, 'W' .. S)
  if t.idem ~= '' then
    redis.call('HSET', KI, t.idem, 'T' .. tid)
  end
end

-- ticket_create: weight, ttl, owner, idempotency key, ticket id, lease id, keepalive,
-- max waiters here, [tenant]
function ops.ticket_create()
  local t = {st = 'w', w = tonumber(ARGV[A]), ttl = tonumber(ARGV[A + 1]), owner = ARGV[A + 2],
             idem = ARGV[A + 3], lid = ARGV[A + 5], ka = tonumber(ARGV[A + 6]), princ = PRINC,
             coll = '0', seq = 0, bw = 0, bf = 0, tenant = ARGV[A + 8] or ''}
  local tid = ARGV[A + 4]
  if KIND ~= 's' then
    return refuse(MSG.NO_SEM)
  end
  if t.w < 1 or t.w > M.cap then
    return refuse(MSG.BAD_WEIGHT)
  end
  if t.idem ~= '' then
    local v = redis.call('HGET', KI, t.idem)
    if v then
      local kind, ref = string.sub(v, 1, 1), string.sub(v, 2)
      local old = kind == 'T' and tk_get(ref)
      local other = kind == 'L' and lget(ref) or kind == 'W' and redis.call('HGET', KW, ref)
      if (old and not allowed(old.princ)) or
         (other and not allowed(kind == 'L' and other.princ or wunpack(other).princ)) then
        return refuse(MSG.KEY_OTHER_TOKEN)
      end
      if not old or old.w ~= t.w or old.tenant ~= t.tenant or old.m == '1' then
        return refuse(MSG.KEY_OTHER_REQUEST)
      end
      tid = string.sub(v, 2)
      tk_touch(tid, old)
      return reply(0, tk_view(tid, old, false))
    end
  end
  if NOW < SAFE_AT then
    return refuse(MSG.REDIS_STATE_LOST)
  end
  local lim = M.lim or t.tenant ~= ''
  if lim and not M.lim then
    LH.activate()
  end
  local heavy = lim and LH.too_heavy(t.w)
  if heavy then
    return refuse(heavy)
  end
  local now_grant = not lim and M.nq == 0 and t.w <= M.avail
  local maxw = tonumber(ARGV[A + 7])
  if not now_grant and maxw > 0 and M.nq >= maxw then
    return refuse(lim and MSG.TOO_MANY_WAITERS_OR_TENANTS or MSG.TOO_MANY_WAITERS)
  end
  if lim and not LH.room(t.tenant) then
    return refuse(MSG.TOO_MANY_WAITERS_OR_TENANTS)
  end
  MU.tk_new(tid, t)
  if now_grant then
    tk_grant(tid, t)
    tk_touch(tid, t)
  else
    M.seq = M.seq + 1
    t.seq, t.bw, t.bf = M.seq, M.wq, fw_prefix(M.seq - 1)
    redis.call('ZADD', KQ, N(M.seq), tid)
    local w = {inst = '', w = t.w, kind = 't', since = NOW, ttl = t.ttl, owner = t.owner,
               idem = '', lid = t.lid, mode = '0', princ = t.princ, tenant = t.tenant}
    redis.call('HSET', KW, tid, wpack(w))
    M.nq = M.nq + 1
    M.wq = M.wq + t.w
    waiter_event(ACT.QUEUED, w)
    redis.call('HSET', KT, tid, tkpack(t))
    keepalive(tid, t)
    if lim then
      LH.join(tid, w, M.seq)
      admit()
      t = tk_get(tid) or t
      if t.st == 'g' then
        tk_touch(tid, t) -- granted at once: its creator sees it
      end
    end
  end
  return reply(0, tk_view(tid, t, true))
end

local TK_TID, TK
function ops.ticket_get()
  tk_touch(TK_TID, TK)
  return reply(0, tk_view(TK_TID, TK, false))
end

function ops.ticket_delete()
  count('t_left', 1)
  tk_end(TK_TID, TK, 'L')
  admit()
  return reply(0)
end

-- ---- tickets on several semaphores (docs/semantics.md) ----
-- A ticket on several semaphores waits as a request on several does (a waiter of kind 'm' in
-- each line, sema:mu:<ticket id> listing its parts) with no instance ('': nobody is told, its
-- holder reads it); its record (field m = '1'), keepalive and lease id live with its first
-- semaphore, as a ticket's on one do, and its grant is MU.grant's: one lease, a fence each.

-- Ticket tid was granted lease lid (MU.grant, the current semaphore its first).
function MU.tk_granted(tid, lid)
  local t = tk_get(tid)
  if not t then
    return
  end
  redis.call('HSET', KTL, lid, tid)
  count('t_granted', 1)
  t.st, t.coll = 'g', '0'
  redis.call('HSET', KT, tid, tkpack(t))
  keepalive(tid, t)
  tk_changed(tid)
end

-- Request wid on several semaphores (w: its part here) failed with `msg`; `first`: its first
-- semaphore, where a ticket's record lives.
function MU.failed(wid, w, first, msg)
  if w.inst ~= '' then
    return outcome(ACT.FAIL, wid, w, '', nil, msg)
  end
  local here = S
  if MU.go(first) then
    local t = tk_get(wid)
    if t then
      tk_forget(wid, t, msg == MSG.WAITER_SEM_DELETED and 'X' or 'F')
    end
  end
  MU.go(here)
end

-- The weight ahead of place `rank` (from 0) of the current line: O(rank).
function MU.ahead(rank)
  if rank <= 0 then
    return 0
  end
  local ids, sum = redis.call('ZRANGE', KQ, '0', N(rank - 1)), 0
  for i = 1, #ids, 500 do -- (unpack has a bound)
    local recs = redis.call('HMGET', KW, unpack(ids, i, math.min(i + 499, #ids)))
    for _, rec in ipairs(recs) do
      if rec then
        sum = sum + wunpack(rec).w
      end
    end
  end
  return sum
end

-- RS_TICKET_FIELD_MAP of a ticket on several (its place: in the line where it stands furthest
-- back, and the estimate there), then its lease's fields once granted, then stem, weight and
-- fence of each part (fence 0 while it waits).
function MU.tk_view(tid, t, created)
  local r = {created and '1' or '0', tid, t.st == 'w' and '1' or '2', N(t.w), '0', '0', N(t.ka),
             '0', '0', '0', '0', '0', '0', '0', '-1', t.tenant}
  if t.st ~= 'w' then
    local l = MU.lease(t.lid)
    return l and cat(r, MU.result(t.lid, l)) or r
  end
  local parts, here, rank, at, pw = MU.waiting(tid) or {}, S, -1, nil, 0
  for _, p in ipairs(parts) do
    if MU.go(p.s) then
      local k = tonumber(redis.call('ZRANK', KQ, tid) or '0')
      if k > rank then
        rank, at, pw = k, p.s, p.w
      end
    end
  end
  if at then
    MU.go(at)
    local ahead = MU.ahead(rank)
    local avail = M.avail > 0 and M.avail or 0
    local need = ahead + pw
    need = need > avail and need - avail or 1
    r[5], r[6] = N(rank + 1), N(ahead)
    r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15] = est_fields(need)
  end
  MU.go(here)
  for _, p in ipairs(parts) do
    r[#r + 1], r[#r + 2], r[#r + 3] = p.s, N(p.w), '0'
  end
  return r
end

-- Whether ticket t (on several) asks for `parts`.
function MU.tk_same(t, parts)
  local have = t.st == 'w' and MU.waiting(t.tid) or (MU.lease(t.lid) or {}).parts or {}
  local same = #have == #parts
  for i = 1, #parts do
    same = same and have[i].s == parts[i].s and have[i].w == parts[i].w
  end
  return same
end

-- ticket_multi (KEYS[1]: the first semaphore's stem): ttl, owner, idempotency key, ticket id,
-- lease id, keepalive, max waiters here, tenant, then each semaphore's stem and weight.
function ops.ticket_multi()
  local tid, parts = ARGV[A + 3], {}
  local t = {st = 'w', ttl = tonumber(ARGV[A]), owner = ARGV[A + 1], idem = ARGV[A + 2],
             lid = ARGV[A + 4], ka = tonumber(ARGV[A + 5]), princ = PRINC, coll = '0', seq = 0,
             bw = 0, bf = 0, tenant = ARGV[A + 7] or '', m = '1'}
  for i = A + 8, #ARGV - 1, 2 do
    parts[#parts + 1] = {s = ARGV[i], w = ARGV[i + 1] + 0}
  end
  t.w = parts[1].w
  local bad = MU.check(parts)
  if bad then
    return refuse(bad)
  end
  if t.idem ~= '' then
    local v = redis.call('HGET', KI, t.idem)
    if v then
      local ref = string.sub(v, 2)
      local old = string.sub(v, 1, 1) == 'T' and tk_get(ref)
      if old and not allowed(old.princ) then
        return refuse(MSG.KEY_OTHER_TOKEN)
      end
      if old then
        old.tid = ref
      end
      if not old or old.m ~= '1' or old.tenant ~= t.tenant or not MU.tk_same(old, parts) then
        return refuse(MSG.KEY_OTHER_TICKET)
      end
      tk_touch(ref, old)
      return reply(0, tk_view(ref, old, false))
    end
  end
  if NOW < SAFE_AT then
    return refuse(MSG.REDIS_STATE_LOST)
  end
  local at_once, full = MU.fits(parts, tonumber(ARGV[A + 6]))
  local lim = MU.limited(parts, t.tenant)
  if full and not at_once and not lim then
    return refuse(MSG.TOO_MANY_WAITERS)
  end
  local w = {inst = '', w = 0, kind = 'm', since = NOW, ttl = t.ttl, owner = t.owner, idem = '',
             lid = t.lid, mode = '0', princ = PRINC, sttl = ARGV[A], tenant = t.tenant}
  if lim then
    return MU.ticket_lim(tid, t, w, parts, full)
  end
  MU.tk_new(tid, t)
  redis.call('HSET', KT, tid, tkpack(t))
  if at_once then
    MU.grant(tid, w, parts, false)
    MU.tk_granted(tid, t.lid)
    t = tk_get(tid)
    tk_touch(tid, t)
    return reply(0, tk_view(tid, t, true))
  end
  MU.join(tid, w, parts)
  keepalive(tid, t)
  return reply(0, tk_view(tid, t, true))
end

-- ticket_multi where limits are: it joins every line, and admission may grant it at once.
function MU.ticket_lim(tid, t, w, parts, full)
  local r = MU.room(w, parts, full)
  if r then
    return r
  end
  MU.tk_new(tid, t)
  redis.call('HSET', KT, tid, tkpack(t))
  MU.enter(tid, w, parts)
  t = tk_get(tid)
  if t.st == 'g' then
    tk_touch(tid, t) -- granted at once: its creator sees it
  else
    MU.queued(w, parts)
    keepalive(tid, t)
  end
  return reply(0, tk_view(tid, t, true))
end

-- KEYS[1] is sema:tk:ID: its semaphore is housekept first (the ticket may end in it).
tk_run = function(k)
  TK_TID = string.sub(k, #H + 4)
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
          return refuse(MSG.TICKET_OTHER_TOKEN)
        end
        return ops[OP]()
      end
      v = redis.call('GET', k)
    else
      v = 'XX'
    end
  end
  if v and string.sub(v, 1, 1) == 'X' then
    return refuse(TK_ENDED[string.sub(v, 2, 2)] or TK_ENDED.D)
  end
  return refuse(MSG.NO_TICKET)
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
  items[#items + 1] = LH.view()
end

-- list, lock_list: prefix, cursor, limit. The index's members (sema:names, sema:locks) are
-- name NUL stem, in name order.
local function list_range(index, pfx, cur, limit)
  local start = '[' .. pfx
  if cur ~= '' and cur >= pfx then
    start = '[' .. cur .. '\1'
  end
  return redis.call('ZRANGEBYLEX', index, start, '+', 'LIMIT', 0, limit + 1)
end
-- The page of `names` (members in name order): {more, items}.
local function list_page(names, pfx, limit)
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
    if PUB == 'SPUBLISH' then
      H = match(stem, '^sema:{[^}]*}')
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
  return {more, items}
end
local function list_index(index)
  local pfx, limit = ARGV[A], tonumber(ARGV[A + 2])
  return reply(0, list_page(list_range(index, pfx, ARGV[A + 1], limit), pfx, limit))
end
function ops.list()
  return list_index(H .. 'names')
end
function ops.lock_list()
  return list_index(H .. 'locks')
end

-- Bytes before bytes, as ZRANGEBYLEX orders them (Lua's '<' follows the locale's collation).
local function bytes_lt(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

-- CRC16/XMODEM of s, as Redis Cluster hashes a key's tag (its table made at the first call:
-- the globals are not reachable while the library loads).
local CRC16
local function crc16(s)
  local band, bxor, shl, shr = bit.band, bit.bxor, bit.lshift, bit.rshift
  if not CRC16 then
    CRC16 = {}
    for i = 0, 255 do
      local c = shl(i, 8)
      for _ = 1, 8 do
        c = band(band(c, 0x8000) ~= 0 and bxor(shl(c, 1), 0x1021) or shl(c, 1), 0xffff)
      end
      CRC16[i] = c
    end
  end
  local crc = 0
  for i = 1, #s do
    crc = band(bxor(shl(crc, 8), CRC16[bxor(shr(crc, 8), string.byte(s, i))]), 0xffff)
  end
  return crc
end

-- The range of ranges ({lo, hi}, ascending) that holds slot, or nil.
local function range_of(ranges, slot)
  for _, r in ipairs(ranges) do
    if slot < r[1] then
      return nil
    end
    if slot <= r[2] then
      return r
    end
  end
  return nil
end

-- The slot ranges this primary serves (its own line of CLUSTER NODES), or nil when it
-- migrates one away (that slot's keys may be half here).
local function own_ranges()
  local me
  for line in string.gmatch(redis.call('CLUSTER', 'NODES'), '[^\n]+') do
    if string.find(line, 'myself', 1, true) then
      me = line
      break
    end
  end
  if not me or string.find(me, '->-', 1, true) then
    return nil
  end
  local ranges, i = {}, 0
  for f in string.gmatch(me, '%S+') do
    i = i + 1
    local lo, hi = match(f, '^(%d+)-(%d+)$')
    lo = lo or match(f, '^(%d+)$')
    if i >= 9 and lo then
      ranges[#ranges + 1] = {tonumber(lo), tonumber(hi or lo)}
    end
  end
  return ranges
end

-- The tags whose index `what` exists here, in the slot ranges asked (ARGV from A + 4: "lo-hi",
-- ascending), found with one SCAN of this primary's keys: O(its keys), where a look-up per slot
-- costs a call for each of thousands of slots. 'probe' when this primary holds many keys (the
-- look-ups cost less then) or migrates a slot away; 'moved' when it does not serve every slot
-- asked (the instance's map is old).
local function indexed_tags(what)
  local asked, n = {}, 0
  for i = A + 4, #ARGV do
    local lo, hi = match(ARGV[i], '^(%d+)-(%d+)$')
    asked[#asked + 1] = {tonumber(lo), tonumber(hi)}
    n = n + hi - lo + 1
  end
  if redis.call('DBSIZE') > 8 * n then
    return 'probe'
  end
  local own = own_ranges()
  if not own then
    return 'probe'
  end
  for _, r in ipairs(asked) do
    local slot = r[1]
    while slot <= r[2] do
      local o = range_of(own, slot)
      if not o then
        return 'moved'
      end
      slot = o[2] + 1
    end
  end
  local found, tags, cur = {}, {}, '0'
  repeat
    local r = redis.call('SCAN', cur, 'MATCH', 'sema:{*}' .. what, 'COUNT', '1000', 'TYPE', 'zset')
    cur = r[1]
    for _, key in ipairs(r[2]) do
      local t = string.sub(key, 7, 14)
      if not found[t] and key == 'sema:{' .. t .. '}' .. what and
          range_of(asked, bit.band(crc16(t), 16383)) then
        found[t] = true
        tags[#tags + 1] = t
      end
    end
  until cur == '0'
  return tags
end

-- sema_list (Redis Cluster: FCALL sema_list 1 KEY op '' flags inst '' '' prefix cursor limit
-- MODE ...): the page of list or lock_list over slots this primary serves (KEYS[1] names one of
-- them). MODE 'r', then slot ranges: the slots' indexes found by one SCAN (indexed_tags), or
-- the answer {'probe'} or {'moved'}; MODE 't', then each slot's tag: each index looked up,
-- and a slot this primary does not serve whole (it moved, or is moving) fails the call ("non
-- local key"). Either way the instance asks again where its map says. Reads only: what a call
-- does first on one slot (its clock, its epoch, its housekeeping) is not done for listing, as
-- on one Redis.
local function list_slots(keys, args)
  SP.init(keys, args)
  OP, PUB = ARGV[1], 'SPUBLISH'
  local t = redis.call('TIME') -- (a view of limits shows the bucket now)
  NOW = t[1] * 1000 + floor(t[2] / 1000)
  local pfx, cur, limit = ARGV[A], ARGV[A + 1], tonumber(ARGV[A + 2])
  local what, all, tags = OP == 'lock_list' and 'locks' or 'names', {}, {}
  if ARGV[A + 3] == 'r' then
    tags = indexed_tags(what)
    if type(tags) == 'string' then
      return {tags}
    end
  else
    for i = A + 4, #ARGV do
      tags[#tags + 1] = ARGV[i]
    end
  end
  for _, t in ipairs(tags) do
    cat(all, list_range('sema:{' .. t .. '}' .. what, pfx, cur, limit))
  end
  table.sort(all, bytes_lt)
  local r = list_page(all, pfx, limit)
  return {'0', '0', '0', '0', '', '', '', r[1], r[2]}
end

-- ---- dispatch ----
local TICKET_KEY_OPS = {ticket_get = true, ticket_delete = true} -- KEYS[1]: sema:tk:<id>
local LEASE_OPS = {lease_get = true, lease_renew = true, lease_release = true,
                   lease_revoke = true, drop_lease = true} -- KEYS[1] is sema:id:LID
local function run()
  local ep = redis.call('HMGET', H .. 'epoch', 'id', 'safe_at', 'horizon', 'due', 'sems',
                       'leases', 'locks', 'layout', 'idue', 'lq')
  IDUE = ep[9] or '0'
  if OP == 'hello' then
    if ep[1] and ep[8] ~= P.LAYOUT_S then
      -- another layout of the keys (a semad of another version wrote them): not read
      return {'', '0', N(NOW), 'layout', ep[8] or '1'}
    end
    -- ARGV: a new epoch id, the id this instance knew ('' at its start), max ttl, the
    -- latest lease expiry it heard of (0: none), '1' when this primary may lack writes
    -- acknowledged on the one before
    local known, maxttl, horizon = ARGV[A + 1], tonumber(ARGV[A + 2]), tonumber(ARGV[A + 3])
    local until_ms = NOW + maxttl
    if horizon > 0 and horizon < until_ms then
      until_ms = horizon
    end
    redis.call('ZADD', H .. 'inst', N(NOW + P.ALIVE_MS), INST) -- (beat renews it)
    inst_due()
    if not ep[1] then
      local safe = 0
      if known ~= '' then
        safe = until_ms -- the data went away under a running instance
      end
      redis.call('HSET', H .. 'epoch', 'id', ARGV[A], 'safe_at', N(safe), 'layout', P.LAYOUT_S)
      return {ARGV[A], N(safe), N(NOW)}
    end
    local safe = tonumber(ep[2] or '0')
    -- (the data went away under a running instance, or a primary that may lack acknowledged
    -- writes took over: ARGV[A + 4], the instance's "unproven")
    if ((known ~= '' and known ~= ep[1]) or ARGV[A + 4] == '1') and safe < until_ms then
      -- (rows written while the pause ran say so, pa: they take no short path until a call
      -- finds it over by this safe_at)
      safe = until_ms
      redis.call('HSET', H .. 'epoch', 'safe_at', N(safe))
    end
    return {ep[1], N(safe), N(NOW)}
  end
  if ep[1] ~= EPOCH then
    return {P.ST_EPOCH_S, ep[1] or ''}
  end
  local sa = ep[2]
  SAFE_AT = (not sa or sa == '0') and 0 or sa + 0
  HORIZON_S = ep[3] or '0'
  HORIZON = nil -- a number when a grant needs it
  DUE_HEAD = ep[4]
  STATS.sems, STATS.locks = ep[5] or '0', ep[7] or '0'
  STATS.leases = N(LQ.check(ep[10], ep[6]))
  if not DUE_HEAD then
    due_head(false) -- an epoch written before it kept the due time: read it once
  end
  if OP == 'list' or OP == 'lock_list' then
    return ops[OP]()
  end
  if OP == 'beat' then
    return beat()
  end
  if OP == 'sweep' then
    LQ.flush()
    local dead = redis.call('ZRANGEBYSCORE', H .. 'inst', '-inf', '(' .. nows(), 'LIMIT', '0',
                            '1')
    if #dead > 0 and dead[1] ~= INST then
      return prune_dead(dead[1])
    end
    if #dead > 0 and PUB == 'SPUBLISH' and redis.call('SCARD', H .. 'iw:' .. INST) == 0 then
      -- On a cluster an instance beats only the slots where it has waiters: its record in
      -- another slot runs out, and with no waiter there it needs none (it says hello again
      -- before it parks one). Gone, it no longer makes this slot's due time the past.
      redis.call('ZREM', H .. 'inst', INST)
      inst_due()
    end
    local x = redis.call('ZRANGE', H .. 'due', '0', '0', 'WITHSCORES')
    if #x == 0 or tonumber(x[2]) > NOW then
      return reply(0)
    end
    keys_of(x[1])
    M = mload()
    if M then
      DUE0 = M.due
      housekeep_all() -- something is due: the sweep is there for it
    end
    return reply(0)
  end
  local k = KEYS[1]
  if TICKET_KEY_OPS[OP] then
    return tk_run(k)
  end
  if LEASE_OPS[OP] then
    LID = string.sub(k, #H + 4)
    local v = redis.call('GET', k)
    if OP == 'drop_lease' and (not v or string.sub(v, 1, 1) == 'T') then
      return reply(0) -- ended already
    end
    if not v then
      return refuse(MSG.NO_LEASE)
    end
    if string.sub(v, 1, 1) == 'T' then
      if RETRY and RID ~= '' and v == 'TR' .. RID then
        return reply(0) -- this release, sent again: it was done
      end
      return refuse(TOMB[string.sub(v, 2, 2)])
    end
    if string.byte(v, 1) == 109 then
      return MU.lease_op(v) -- a lease on several semaphores
    end
    local l, stem = lparse(v)
    if not stem then
      return refuse(MSG.NO_LEASE)
    end
    keys_of(stem)
    M = mload()
    if not M then
      return refuse(MSG.NO_LEASE)
    end
    DUE0 = M.due
    housekeep()
    if M.due < 0 then
      -- the housekeeping ran: the lease may have ended in it
      v = redis.call('GET', k)
      l = lread(LID, v)
      if not l then
        if OP == 'drop_lease' then
          return reply(0)
        end
        return refuse(TOMB[string.sub(v or 'TE', 2, 2)] or TOMB.E)
      end
    end
    LEASE = l
    return ops[OP]()
  end
  keys_of(k)
  M = mload()
  DUE0 = M and M.due or -2
  if not M then
    if OP == 'lock_acquire' then
      local max = limit(1)
      if max > 0 and locks_now() >= max then
        return refuse(MSG.TOO_MANY_LOCKS)
      end
      M = mnew(limit(3), 0)
      LOCK_NEW = true
    elseif OP == 'put' or OP == 'legacy_create' or OP == 'collect' or OP == 'cancel' then
      return ops[OP]()
    elseif OP == 'lock_get' then
      return refuse(MSG.NO_LOCK)
    elseif OP == 'acquire_multi' or OP == 'ticket_multi' then
      return refuse(MSG.NO_SEM_OF_SEVERAL)
    else
      return refuse(MSG.NO_SEM)
    end
  end
  housekeep()
  return ops[OP]()
end

-- The event log. While an instance follows a semaphore's events (its marker :s exists, with
-- the field `log` = "<uid>-<seq>": the log's run and its last event), every public event gets
-- the id <uid>-<seq+1>, ... and is kept in the stream :e under that id (at least the last
-- P.LOG_MAX; the stream lives as long as the marker, which instances renew), and published
-- with its id on sema:ev:<stem>. Ids therefore mean the same on every instance. Without a
-- marker nothing is written (one HGET). A marker that comes back (it expired: no instance
-- renewed it; Redis lost it) starts a new run with a new uid, so an id from before never
-- resumes across the gap. A delete ends the run: a new semaphore of the name starts a new one.

-- The current semaphore's events in its log, and published as from instance `from`: the
-- log's uid and the first one's number (nil when none).
function MU.log(from)
  local pt = LOG
  if not S or #ACTS == 0 or not pt then
    return nil
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
  for i = 1, #ACTS, P.ACT_LEN do
    local t = ACTS[i]
    if t <= P.ACT_PUBLIC_MAX or t == ACT.QUEUED or t == ACT.LEFT then
      local a = {}
      for j = 0, P.ACT_LEN - 1 do
        a[j + 1] = ACTS[i + j]
        ev[#ev + 1] = ACTS[i + j]
      end
      seq = seq + 1
      if t == ACT.DELETED then
        ended = true
      else
        local id = uid .. '-' .. N(seq)
        local p = table.concat(a, '\0')
        local x = redis.pcall('XADD', KE, 'MAXLEN', '~', P.LOG_MAX_S, id, 'a', p)
        if type(x) == 'table' and x.err then
          redis.call('DEL', KE) -- cannot happen (ids only grow): keep the run going anyway
          redis.call('XADD', KE, 'MAXLEN', '~', P.LOG_MAX_S, id, 'a', p)
        end
      end
    end
  end
  if #ev == 0 then
    return nil
  end
  if ended then
    redis.call('DEL', KE)
    redis.call('HDEL', KS, 'log')
  else
    redis.call('PEXPIRE', KE, P.LOG_TTL_MS_S) -- as the marker's
    redis.call('HSET', KS, 'log', uid .. '-' .. N(seq))
  end
  local id = uid .. '-' .. N(first)
  redis.call(PUB, 'sema:ev:' .. S, from .. '\0' .. id .. '\0' .. table.concat(ev, '\0'))
  return uid, first
end

local function publish(r)
  if WAKE ~= NONE then
    for inst, _ in pairs(WAKE) do
      redis.call(PUB, H .. 'wake:' .. inst, S)
    end
  end
  local uid, first = MU.log(INST)
  if uid and type(r[7]) == 'string' then -- the caller numbers its own events from its reply
    r[7] = r[7] .. '\0' .. uid .. '\0' .. N(first)
  end
  return r
end

-- follow (KEYS[1] the stem; a fresh run "<uid>-0"): an instance follows the semaphore's
-- events, or renews its marker: the marker (with a new run if it had gone) and the log live
-- another LOG_TTL_MS, and the row says someone follows (ev = 1) from now on. Answers whether
-- the marker had gone (1), where the log stands, and whether the semaphore exists (1).
follow = function(k)
  keys_of(k)
  local KE = S .. ':e'
  local new = redis.call('HSETNX', KS, 'log', ARGV[A])
  redis.call('HSET', KS, INST, '1')
  redis.call('PEXPIRE', KS, P.LOG_TTL_MS_S)
  redis.call('PEXPIRE', KE, P.LOG_TTL_MS_S)
  local m = redis.call('GET', KM)
  if m then
    redis.call('SETRANGE', KM, ROW_AT.ev, struct.pack('<d', 1))
  end
  return {N(new), redis.call('HGET', KS, 'log'), m and '1' or '0'}
end

-- A call on Redis Cluster: keys[i] (KEYS[1] unless told) is the key followed by '!', a key
-- that never exists (while the slot migrates, Redis sends the call elsewhere rather than run
-- it with part of the slot's keys moved): the key itself, its slot's hash tag for the keys
-- that are not one semaphore's (H), and SPUBLISH on that slot.
function SP.on_cluster(keys, i)
  i = i or 1
  keys[i] = string.sub(keys[i], 1, -2)
  H, PUB = match(keys[i], '^sema:{[^}]*}') or 'sema:', 'SPUBLISH'
end

-- Redis's clock (TIME), once per call.
function SP.clock()
  local t = rcall('TIME')
  local ss = t[1]
  local sec, us = SP.nums[ss] or SP.num(ss), t[2] + 0
  NOW = sec * 1000 + floor(us / 1000)
  NOWUS = sec * 1000000 + us
  NOWS = nil
end

-- The head (ARGV's first RS_HEAD_LEN) read, and the short paths tried: their answer, or nil.
function SP.head(keys)
  OP, EPOCH, INST, RID, PRINC = ARGV[1], ARGV[2], ARGV[4], ARGV[5], ARGV[6]
  local fl = ARGV[3] -- '0' or '1', then 't' (a tenant), 'r' (sent again) and 'p' (a pause), if
  -- so; 'c' last
  if #fl > 1 and string.byte(fl, -1) == 99 then -- 'c': on Redis Cluster
    SP.on_cluster(keys)
    fl = string.sub(fl, 1, -2)
  else
    H, PUB = 'sema:', 'PUBLISH'
  end
  local plain = fl == '0' or fl == '1' -- (not sent again, no pause the instance knows of)
  if plain then
    ADMIN, RETRY = fl, false
  else
    ADMIN, RETRY = string.sub(fl, 1, 1), string.find(fl, 'r', 2, true) ~= nil
  end
  -- (a plain release here is one semad did not pack, strict durability's sent again: its
  -- short path answers an integer, which semad reads as a release's only for a packed call,
  -- so it takes the general path)
  SP.clock()
  -- (an acquire naming a tenant is sent with 't' after the flag: plain besides, it may take
  -- the short path of a semaphore with limits)
  if (plain or fl == ADMIN .. 't') and OP == 'acquire' and ARGV[A + 5] == '' then
    local sw, sttl, tn = ARGV[A], ARGV[A + 2], ARGV[A + 7]
    return acquire_at_once(keys[1], SP.nums[sw] or SP.num(sw), SP.nums[sttl] or SP.num(sttl),
                           SP.nums[EPOCH] or SP.num(EPOCH), ARGV[A + 3], ARGV[A + 4], false,
                           tn ~= '' and tn or nil)
  end
  return nil
end

-- A call's start: its keys and arguments, and the upvalues the globals give (at the library's
-- first call). (main does the same in line: a call costs the short paths more than a test)
function SP.init(keys, args)
  KEYS, ARGV = keys, args
  if fmt then
    return
  end
  fmt, match, concat, floor = string.format, string.match, table.concat, math.floor
  rcall, spack, sunpack = redis.call, struct.pack, struct.unpack
  sbyte = string.byte
  SP.to_hz = '<' .. string.rep('d', ROW_AT.hz / 8 + 1)
  SP.avail_to_ev = '<' .. string.rep('d', (ROW_AT.ev - ROW_AT.avail) / 8 + 1)
  SP.avail = ROW_AT.avail + 1 -- (where AVAIL starts)
  SP.rowlen = #ROW * 8 -- (a row with limits is longer: its limits' numbers follow)
end

-- The general path of a call whose short path was not taken (its head read: OP, EPOCH,
-- INST, RID, ADMIN, RETRY, PRINC; ARGV; Redis's clock; KEYS): its answer. Every call starts
-- from the same state here, alone or one of a batch's.
function SP.general(keys)
  if OP == 'follow' then
    return follow(keys[1])
  end
  if MU.used then -- (the short paths use none of it)
    MU.wc, MU.afc, MU.htc, MU.used = {}, {}, {}, false -- (a call's own)
  end
  ACTS, WAKE, GRANTED = NONE, NONE, NONE
  LIM, LH.self_wid, LH.self_lease = nil, nil, nil
  S, M, LID, LEASE, SAFE_AT, MORE, LOCK_NEW = nil, nil, nil, nil, 0, false, false
  DUE0, OWN, REBUILT, LOG, MU.cx = -2, false, false, nil, nil
  if RID ~= '' and RETRY then
    local c = redis.call('GET', H .. 'r:' .. RID)
    if c then
      return cmsgpack.unpack(c)
    end
  end
  local r = publish(run())
  -- The answer to a write is kept for a retry, unless a retry can work it out again from
  -- what the write left (a grant made at once: its lease; a release: its tombstone) and
  -- nothing in it completes a parked request of this instance.
  if RID ~= '' and r[1] ~= P.ST_EPOCH_S and not (REBUILT and r[1] == '0' and not OWN) then
    redis.call('SET', H .. 'r:' .. RID, cmsgpack.pack(r), 'PX', P.RESULT_TTL_MS_S)
  end
  return r
end

-- The batch's members from the i-th on, their answers into out (out[j], the j-th's): its
-- short path's, or else its general path's, run here, in its place: Redis runs every member
-- where the instance put it, and nothing sent after the batch can come before any of them.
-- (Each member's key alone is KEYS for its general path: on one Redis, where batches go, a
-- call may touch keys it does not name, as the general path's every call does.)
function SP.members(keys, args, out, i)
  for j = i, #keys do
    local r = SP.packed(keys, j, args[j], true)
    if not r then
      KEYS = {keys[j]}
      r = SP.general(KEYS)
    end
    out[j] = r
  end
end

-- Several packed calls in one (redis_batch.c; KEYS[i] and ARGV[i] each one's, in the order
-- the instance got them), one clock for all: every member's answer, in order, as it would be
-- alone. A member whose run raises an error answers with that error, as a call alone would,
-- and those after it still run (the loop is protected once, and taken up again after one).
function SP.batch(keys, args)
  local out, i = {}, 1
  SP.clock()
  while true do
    local ok, e = pcall(SP.members, keys, args, out, i)
    if ok then
      return out
    end
    i = #out + 1
    out[i] = type(e) == 'table' and e.err and e or {err = tostring(e)}
    i = i + 1
    if i > #keys then
      return out
    end
  end
end

local function main(keys, args)
  KEYS, ARGV = keys, args
  if not fmt then
    SP.init(keys, args)
  end
  local r
  if #args == 1 then -- (an acquire or a release in one argument: RS_PK_*)
    r = SP.packed(keys, 1, args[1])
  elseif #keys > 1 then -- (several of them: SP.batch)
    return SP.batch(keys, args)
  else
    r = SP.head(keys)
  end
  if r then
    return r
  end
  return SP.general(keys)
end

redis.register_function('sema', main)
redis.register_function{function_name = 'sema_list', callback = list_slots,
                        flags = {'no-writes', 'allow-cross-slot-keys'}}
