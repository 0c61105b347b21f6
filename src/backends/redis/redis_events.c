/* SPDX-License-Identifier: MIT */
/* redis_events.c - event ids that mean the same on every instance of one Redis.
 *
 * While any instance follows a semaphore's events, its marker (:s) holds `log` =
 * "<uid>-<seq>": the run of the semaphore's event log and its last event. sema.lua's
 * publish() numbers every public event from it, keeps it in the stream :e under that id
 * (capped) and publishes it with its id. This instance hands the events of a semaphore to
 * the front in the log's order, whichever way they come (its own scripts' replies, the
 * other instances' messages): one that comes early (a gap before it) first has the gap
 * filled from the stream, and one already handed over is dropped. A resume reads the
 * stream. Every read is a command on the loop like any other (RS_CMD_READ): while a gap is
 * being filled, events that come after it wait in the stream, and are read from it next. */
#include "backends/redis/redis_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REASON_NEW_RUN                                                                             \
    "the semaphore's events started a new run: some may have been lost (read the state again)"
#define REASON_LOST "some of the semaphore's events were lost on their way to this instance"
#define REASON_UNREAD "the semaphore's events could not be read from Redis: some may have been lost"

/* ---- fields separated by NUL, as a reply array ---- */

int rs__split(rs_split_t *sp, const char *p, size_t n)
{
    size_t cap = 1, k = 0;

    memset(sp, 0, sizeof(*sp));
    for (size_t i = 0; i < n; i++)
        cap += p[i] == '\0';
    sp->buf = sema__malloc(n + 1);
    sp->els = sema__malloc(cap * sizeof(*sp->els));
    sp->cells = sema__calloc(cap, sizeof(*sp->cells));
    if (sp->buf == NULL || sp->els == NULL || sp->cells == NULL) {
        rs__split_free(sp);
        return -1;
    }
    memcpy(sp->buf, p, n);
    sp->buf[n] = '\0';
    for (char *q = sp->buf, *end = sp->buf + n; k < cap && q <= end; k++) {
        size_t len = strlen(q);
        sp->cells[k].type = REDIS_REPLY_STRING;
        sp->cells[k].str = q;
        sp->cells[k].len = len;
        sp->els[k] = &sp->cells[k];
        q += len + 1;
    }
    sp->arr.type = REDIS_REPLY_ARRAY;
    sp->arr.element = sp->els;
    sp->arr.elements = k;
    return 0;
}

void rs__split_free(rs_split_t *sp)
{
    sema__free(sp->buf);
    sema__free(sp->els);
    sema__free(sp->cells);
    memset(sp, 0, sizeof(*sp));
}

/* "<uid>-<seq>" -> 0, or -1. */
static int parse_point(const char *s, size_t len, uint64_t *uid, uint64_t *seq)
{
    char buf[48], *end;

    if (s == NULL || len == 0 || len >= sizeof buf || s[0] < '0' || s[0] > '9')
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    *uid = strtoull(buf, &end, 10);
    if (*end != '-' || end[1] < '0' || end[1] > '9')
        return -1;
    *seq = strtoull(end + 1, &end, 10);
    return *end == '\0' && *uid != 0 ? 0 : -1;
}

static const char *sem_name(const rs_sem_t *s, size_t *nlen)
{
    *nlen = s->stem_len > RS_STEM_HEAD ? s->stem_len - RS_STEM_HEAD : 0;
    return s->stem + RS_STEM_HEAD;
}

/* A "reset" to every subscriber of s here, with the id uid-seq. */
static void ev_reset(rs_t *r, rs_sem_t *s, uint64_t uid, uint64_t seq, const char *reason)
{
    size_t nlen;
    const char *name = sem_name(s, &nlen);
    engine_event_t ev = {
        .type = "reset", .name = name, .name_len = nlen, .uid = uid, .seq = seq, .reason = reason};

    if (uid != 0)
        engine__event(r->front, &ev);
}

/* ---- the marker ---- */

/* The command of the script's follow: the marker of this instance (a fresh run if it had
 * gone), the log kept alive, the row told someone follows; NULL when out of memory. */
static rs_cmd_t *follow_cmd(rs_t *r, const rs_sem_t *s, int kind)
{
    char fresh[48];
    uint64_t uid;
    rs_args_t a = {0};

    engine__random(r->front, &uid, sizeof uid);
    snprintf(fresh, sizeof fresh, "%llu-0", (unsigned long long)((uid >> 12) | 1));
    rs__args_head(r, &a, s->stem, s->stem_len, rs__op_name(RS_OP_FOLLOW), "", NULL);
    rs__arg_str(&a, fresh);
    return rs__cmd_build(r, kind, &a);
}

/* A read about s is out: s is kept until its answer (rs__sem_maybe_free). */
static void read_send(rs_t *r, rs_sem_t *s, rs_cmd_t *c, rs_req_t *rq,
                      void (*done)(rs_t *r, rs_cmd_t *c, const redisReply *rep))
{
    c->sem = s;
    c->rq = rq;
    c->done = done;
    s->reads++;
    if (!r->closing) {
        rs__send(r, c);
        return;
    }
    done(r, c, NULL); /* (closing: nothing more is sent, and s goes soon) */
    rs__cmd_free(c);
}

/* The answer of a read about c->sem came (or failed): s is released. */
static rs_sem_t *read_end(rs_t *r, rs_cmd_t *c)
{
    rs_sem_t *s = c->sem;

    (void)r;
    s->reads--;
    return s;
}

/* The follow's answer: s->pt_* (where the log stands; a marker that was gone came back with
 * a new run); 0, or -1 when there is none. */
static int followed(rs_sem_t *s, const redisReply *rep)
{
    int ok = rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 &&
             rep->element[1]->type == REDIS_REPLY_STRING &&
             parse_point(rep->element[1]->str, rep->element[1]->len, &s->pt_uid, &s->pt_seq) == 0;

    if (ok)
        s->pt_gone = strcmp(rs__el_str(rep, 2, NULL), "0") == 0;
    s->pt_ok = (uint8_t)ok;
    return ok ? 0 : -1;
}

/* s is followed by a new subscription (its follow just answered): a semaphore this instance
 * did not follow starts at the log's point; one it followed in another run gives its
 * subscribers "reset" and goes on with the current run. */
static void ev_start(rs_t *r, rs_sem_t *s, int was_watched)
{
    if (!was_watched) {
        s->ev_uid = s->pt_ok ? s->pt_uid : 0;
        s->ev_seq = s->pt_ok ? s->pt_seq : 0;
        s->own_uid = s->own_seq = 0;
        return;
    }
    if (s->pt_ok && s->pt_uid != s->ev_uid) {
        ev_reset(r, s, s->pt_uid, s->pt_seq, REASON_NEW_RUN);
        s->ev_uid = s->pt_uid;
        s->ev_seq = s->pt_seq;
    }
}

/* One entry of an XRANGE reply of the log, if its id is <uid>-<want>: its event into *ev (its
 * strings in scratch, its lease or waiter in room). Returns 0 (*got: 1, or 0 for an act that
 * is not an event), LOG_OTHER (another id: a gap or another run) or LOG_BAD (an entry that
 * cannot be read, or out of memory). */
enum { LOG_OTHER = 1, LOG_BAD = 2 };
static int log_event(const redisReply *e, uint64_t uid, uint64_t want, const char *name,
                     size_t nlen, engine_result_t *scratch, rs_ev_room_t *room, engine_event_t *ev,
                     int *got)
{
    const redisReply *f;
    uint64_t eu, q;
    rs_split_t sp;

    *got = 0;
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
        e->element[0]->type != REDIS_REPLY_STRING ||
        parse_point(e->element[0]->str, e->element[0]->len, &eu, &q) != 0 || eu != uid || q != want)
        return LOG_OTHER;
    f = e->element[1];
    if (f->type != REDIS_REPLY_ARRAY || f->elements < 2 ||
        f->element[1]->type != REDIS_REPLY_STRING ||
        rs__split(&sp, f->element[1]->str, f->element[1]->len) != 0)
        return LOG_BAD;
    if (sp.arr.elements >= RS_ACT_LEN &&
        rs__act_to_event(&sp.arr, 0, name, nlen, scratch, ev, room) == 0) {
        ev->uid = uid;
        ev->seq = q;
        *got = 1;
    }
    rs__split_free(&sp);
    return 0;
}

/* The same, its event handed to the front at once. */
static int log_entry(rs_t *r, const redisReply *e, uint64_t uid, uint64_t want, const char *name,
                     size_t nlen)
{
    engine_result_t scratch;
    engine_event_t ev;
    rs_ev_room_t room;
    int got, rc;

    memset(&scratch, 0, sizeof scratch);
    rc = log_event(e, uid, want, name, nlen, &scratch, &room, &ev, &got);
    if (rc == 0 && got)
        engine__event(r->front, &ev);
    engine_result_clear(&scratch);
    return rc;
}

/* The seq of an XRANGE entry's id, or 0. */
static uint64_t entry_seq(const redisReply *e)
{
    uint64_t uid, seq;

    if (e->type != REDIS_REPLY_ARRAY || e->elements < 1 ||
        e->element[0]->type != REDIS_REPLY_STRING ||
        parse_point(e->element[0]->str, e->element[0]->len, &uid, &seq) != 0)
        return 0;
    return seq;
}

/* ---- in order ---- */

static void ev_fill(rs_t *r, rs_sem_t *s, uint64_t upto);

/* The read of the events uid-first to uid-last of s's stream (counted); NULL: no memory. */
static rs_cmd_t *xrange_cmd(rs_t *r, const rs_sem_t *s, uint64_t uid, uint64_t first, uint64_t last)
{
    rs_args_t a = {0};
    char from[48], to[48];
    size_t kl;
    char *ke = rs__key_cat("", s->stem, s->stem_len, ":e", &kl);
    rs_cmd_t *c;

    if (ke == NULL)
        return NULL;
    snprintf(from, sizeof from, "%llu-%llu", (unsigned long long)uid, (unsigned long long)first);
    snprintf(to, sizeof to, "%llu-%llu", (unsigned long long)uid, (unsigned long long)last);
    rs__arg_str(&a, "XRANGE");
    rs__arg(&a, ke, kl);
    rs__arg_str(&a, from);
    rs__arg_str(&a, to);
    c = rs__cmd_build(r, RS_CMD_READ, &a);
    sema__free(ke);
    r->log_reads += c != NULL;
    return c;
}

/* The stream's answer to a fill: its events in order, then a "reset" past a hole (trimmed, or
 * Redis did not answer); the next fill if more came meanwhile. */
static void fill_done(rs_t *r, rs_cmd_t *c, const redisReply *rep)
{
    rs_sem_t *s = read_end(r, c);
    size_t nlen;
    const char *name = sem_name(s, &nlen);
    uint64_t upto = s->fill_asked;

    s->filling = 0;
    if (s->watched && s->ev_uid == s->fill_uid) { /* (else a new run started meanwhile) */
        for (size_t i = 0; rep != NULL && rep->type == REDIS_REPLY_ARRAY && i < rep->elements;
             i++) {
            uint64_t seq = entry_seq(rep->element[i]);
            if (seq != 0 && seq <= s->ev_seq)
                continue; /* (handed over meanwhile: a reply or a message that came in order) */
            if (log_entry(r, rep->element[i], s->ev_uid, s->ev_seq + 1, name, nlen) != 0)
                break;
            s->ev_seq++;
        }
        if (s->ev_seq < upto) {
            ev_reset(r, s, s->ev_uid, upto, REASON_LOST);
            s->ev_seq = upto;
        }
        if (s->fill_to > s->ev_seq)
            ev_fill(r, s, s->fill_to);
    }
    rs__sem_maybe_free(r, s);
}

/* Hand the events after s->ev_seq up to `upto` to the front, read from the stream (one read
 * at a time: a later gap waits for it). */
static void ev_fill(rs_t *r, rs_sem_t *s, uint64_t upto)
{
    rs_cmd_t *c;

    if (upto > s->fill_to || s->fill_uid != s->ev_uid)
        s->fill_to = upto;
    s->fill_uid = s->ev_uid;
    if (s->filling || (c = xrange_cmd(r, s, s->ev_uid, s->ev_seq + 1, s->fill_to)) == NULL)
        return; /* (out of memory: the heartbeat's fill tries again) */
    s->filling = 1;
    s->fill_asked = s->fill_to;
    read_send(r, s, c, NULL, fill_done);
}

void rs__ev_batch(rs_t *r, rs_sem_t *s, uint64_t uid, uint64_t first, const redisReply *acts)
{
    size_t nlen;
    const char *name;
    uint64_t seq = first;
    engine_result_t scratch;

    if (s == NULL || !s->watched || uid == 0 || first == 0 || acts == NULL)
        return;
    name = sem_name(s, &nlen);
    if (uid != s->ev_uid) {
        /* another run of the log (or the first this instance knows of): the front gives
         * the subscribers of the former one "reset" with its first event */
        s->ev_uid = uid;
        s->ev_seq = first - 1;
    } else if (first > s->ev_seq + 1) {
        /* events that have not reached this instance yet: these wait in the stream after
         * them, and come from it */
        for (size_t i = 0; i + RS_ACT_LEN <= acts->elements; i += RS_ACT_LEN)
            seq += rs__act_is_event(acts, i) != 0;
        ev_fill(r, s, seq - 1);
        return;
    }
    memset(&scratch, 0, sizeof scratch);
    for (size_t i = 0; i + RS_ACT_LEN <= acts->elements; i += RS_ACT_LEN) {
        engine_event_t ev;
        rs_ev_room_t l;
        if (!rs__act_is_event(acts, i))
            continue;
        if (seq > s->ev_seq && rs__act_to_event(acts, i, name, nlen, &scratch, &ev, &l) == 0) {
            ev.uid = uid;
            ev.seq = seq;
            engine__event(r->front, &ev);
        }
        engine_result_clear(&scratch);
        if (seq > s->ev_seq)
            s->ev_seq = seq;
        seq++;
    }
}

/* A message on sema:ev:<stem>: "<inst>\0<uid>-<first>\0" then RS_ACT_LEN fields per event.
 * This instance's own come from its scripts' replies, in order with their completions: their
 * message only says how far the log went (a reply lost to a dropped connection leaves a
 * gap that the heartbeat fills). */
void rs__ev_message(rs_t *r, const char *stem, size_t slen, const char *pay, size_t plen)
{
    rs_sem_t *s = rs__sem_find(r, stem, slen);
    size_t ilen = strnlen(pay, plen), idlen;
    const char *id;
    uint64_t uid, first;
    rs_split_t sp;

    if (s == NULL || !s->watched || ilen >= plen)
        return;
    id = pay + ilen + 1;
    idlen = strnlen(id, plen - ilen - 1);
    if (parse_point(id, idlen, &uid, &first) != 0 || first == 0)
        return;
    if (ilen == strlen(r->inst) && memcmp(pay, r->inst, ilen) == 0) {
        size_t n = 0;
        for (size_t i = ilen + 1; i < plen; i++)
            n += pay[i] == '\0';
        if (n >= RS_ACT_LEN && (uid != s->own_uid || first + n / RS_ACT_LEN - 1 > s->own_seq)) {
            s->own_uid = uid;
            s->own_seq = first + n / RS_ACT_LEN - 1;
        }
        return;
    }
    if (ilen + 1 + idlen >= plen ||
        rs__split(&sp, id + idlen + 1, plen - (ilen + 1 + idlen + 1)) != 0)
        return;
    sp.arr.elements -= sp.arr.elements % RS_ACT_LEN;
    rs__ev_batch(r, s, uid, first, &sp.arr);
    rs__split_free(&sp);
}

/* Where the log stands (ok: s->pt_*, or it could not be read): what this instance has not
 * handed over yet comes from it. */
static void catch_up_with(rs_t *r, rs_sem_t *s, int ok)
{
    if (!ok) {
        ev_reset(r, s, s->ev_uid, s->ev_seq, REASON_UNREAD);
        s->ev_uid = 0; /* the next event's run is taken as it comes */
        return;
    }
    if (s->pt_gone) {
        /* deleted meanwhile: its "deleted" (the log's last event) may be on its way */
        if (s->ev_uid != 0) {
            size_t nlen;
            engine_event_t ev = {.type = "deleted", .uid = s->ev_uid, .seq = s->ev_seq + 1};
            ev.name = sem_name(s, &nlen);
            ev.name_len = nlen;
            s->ev_seq++;
            engine__event(r->front, &ev);
        }
    } else if (s->pt_uid != s->ev_uid) {
        ev_reset(r, s, s->pt_uid, s->pt_seq, REASON_NEW_RUN);
        s->ev_uid = s->pt_uid;
        s->ev_seq = s->pt_seq;
    } else if (s->pt_seq > s->ev_seq) {
        ev_fill(r, s, s->pt_seq);
    }
}

static void caught_up(rs_t *r, rs_cmd_t *c, const redisReply *rep)
{
    rs_sem_t *s = read_end(r, c);
    int ok = followed(s, rep) == 0;

    if (s->watched)
        catch_up_with(r, s, ok);
    rs__sem_maybe_free(r, s);
}

/* This instance (re)subscribed to the semaphore's channel: what was published before that
 * took effect is in the log (its follow tells how far it went). */
void rs__ev_catch_up(rs_t *r, const char *stem, size_t len)
{
    rs_sem_t *s = rs__sem_find(r, stem, len);
    rs_cmd_t *c;

    if (s == NULL || !s->watched)
        return;
    if ((c = follow_cmd(r, s, RS_CMD_READ)) == NULL)
        catch_up_with(r, s, 0);
    else
        read_send(r, s, c, NULL, caught_up);
}

static void catch_up_each(void *arg, enode_t *n)
{
    rs_sem_t *s = ECONTAINER(n, rs_sem_t, node);

    if (s->watched)
        rs__ev_catch_up(arg, s->stem, s->stem_len);
}

/* The heartbeat's HSETNX of the log's run answered: 1 means the marker had gone (it expired
 * while this instance could not renew it, or Redis lost its data), so events may have gone
 * unlogged: the semaphore's streams get "reset" (or "deleted", if it went too). */
void rs__ev_marked(rs_t *r, const rs_cmd_t *c, const redisReply *rep)
{
    const char *key = (const char *)(c->lens + c->argc);
    size_t klen = (size_t)c->argc > RS_FCALL_HEAD ? c->lens[RS_FCALL_HEAD - 1] : 0;
    rs_sem_t *s;

    for (int i = 0; i < RS_FCALL_HEAD - 1 && i < c->argc; i++)
        key += c->lens[i]; /* FCALL sema 1 KEY: the key is the stem */
    if (klen == 0 || strcmp(rs__el_str(rep, 0, NULL), "1") != 0)
        return;
    s = rs__sem_find(r, key, klen);
    if (s != NULL && s->watched && s->ev_uid != 0)
        rs__ev_catch_up(r, s->stem, s->stem_len);
}

/* Redis lost its data: every log this instance follows starts a new run. */
void rs__ev_catch_up_all(rs_t *r)
{
    etab_each(&r->sems, catch_up_each, r);
}

/* On the heartbeat: events of this instance whose reply never came (a retried command
 * answered from what the first attempt left) are read from the log. */
static void ev_heartbeat(rs_t *r, rs_sem_t *s)
{
    if (s->watched && s->ev_uid != 0 && s->own_uid == s->ev_uid && s->own_seq > s->ev_seq)
        ev_fill(r, s, s->own_seq);
}

/* The heartbeat of a semaphore this instance follows: while the front still has streams
 * of it (or keeps its events for a resume), the marker and the log live on (a marker that
 * expired comes back with a new run: rs__ev_marked); once it has none, the instance stops
 * following it. */
void rs__ev_renew(rs_t *r, rs_sem_t *s)
{
    size_t nlen, kl;
    char kind;
    const char *name = rs__stem_name(s->stem, s->stem_len, &nlen, &kind);
    rs_cmd_t *c;

    if (!engine__watched(r->front, name, nlen) && s->reads == 0) {
        /* (a read out may be a subscription's open: it has no stream yet) */
        rs_args_t a = {0};
        char *ks = rs__key_cat("", s->stem, s->stem_len, ":s", &kl);
        rs__sub_watch(r, s, 0);
        s->watched = 0;
        s->ev_uid = s->ev_seq = 0;
        if (ks == NULL)
            return; /* out of memory: the marker expires by itself */
        rs__arg_str(&a, "HDEL");
        rs__arg(&a, ks, kl);
        rs__arg_str(&a, r->inst);
        rs__send_plain(r, &a);
        sema__free(ks);
        return;
    }
    if ((c = follow_cmd(r, s, RS_CMD_MARK)) != NULL)
        rs__send(r, c);
    ev_heartbeat(r, s);
}

/* ---- a subscription's open (ENGINE_EVENTS_OPEN): does the semaphore exist, then this
 * instance follows its events (the marker is set before the subscription's answer, so every
 * change made once the client has it is logged and published), then, with a Last-Event-ID,
 * what followed it is read from the stream ---- */

static void open_end(rs_t *r, rs_req_t *rq, rs_sem_t *s, int status)
{
    engine_req_t *req = rq->req;

    if (req == NULL) {
        sema__free(rq); /* (cancelled while it read) */
    } else {
        if (status == 0 && s->watched && req->res.log_uid != 0 && s->ev_uid == req->res.log_uid &&
            s->ev_seq > req->res.log_seq) {
            /* events handed over while the stream was read reached no subscription of this
             * request (it has none yet): they come again from the stream, after its answer
             * (a subscription that had them skips them) */
            uint64_t upto = s->ev_seq;
            s->ev_seq = req->res.log_seq;
            ev_fill(r, s, upto);
        }
        rs__finish(r, rq, status, NULL, 0);
    }
    rs__sem_maybe_free(r, s);
}

/* The stream after the client's id up to the point: every event, or why not. */
static void open_replayed(rs_t *r, rs_cmd_t *c, const redisReply *rep)
{
    rs_sem_t *s = read_end(r, c);
    rs_req_t *rq = c->rq;
    engine_req_t *req = rq->req;
    size_t n = rep != NULL && rep->type == REDIS_REPLY_ARRAY ? rep->elements : 0;
    engine_event_t *evs;
    rs_ev_room_t *rooms;

    if (req == NULL)
        return open_end(r, rq, s, 0);
    req->res.log_rc = rep == NULL || rep->type != REDIS_REPLY_ARRAY ? ENGINE_LOG_UNKNOWN
                      : n != req->res.log_seq - req->from_seq       ? ENGINE_LOG_GONE /* trimmed */
                                                                    : ENGINE_LOG_OK;
    if (req->res.log_rc != ENGINE_LOG_OK)
        return open_end(r, rq, s, 0);
    evs = engine_result_alloc(&req->res, n * sizeof(*evs));
    rooms = engine_result_alloc(&req->res, n * sizeof(*rooms));
    if (evs == NULL || rooms == NULL) {
        req->res.log_rc = ENGINE_LOG_UNKNOWN;
        return open_end(r, rq, s, 0);
    }
    req->res.replay = evs;
    for (size_t i = 0; i < n; i++) {
        int got, e = log_event(rep->element[i], req->res.log_uid, req->from_seq + 1 + i, req->name,
                               req->name_len, &req->res, &rooms[req->res.nreplay],
                               &evs[req->res.nreplay], &got);
        if (e != 0) {
            req->res.log_rc = e == LOG_OTHER ? ENGINE_LOG_GONE : ENGINE_LOG_UNKNOWN;
            break;
        }
        req->res.nreplay += (size_t)got;
    }
    open_end(r, rq, s, 0);
}

/* Where the log stands, and with an id, what followed it. */
static void open_replay(rs_t *r, rs_req_t *rq, rs_sem_t *s)
{
    engine_req_t *req = rq->req;
    rs_cmd_t *c;

    if (s->pt_ok) {
        req->res.log_uid = s->pt_uid;
        req->res.log_seq = s->pt_seq;
    }
    if (req->id == NULL || !s->pt_ok)
        return open_end(r, rq, s, 0); /* (log_rc: ENGINE_LOG_UNKNOWN) */
    req->res.log_rc = req->from_uid != s->pt_uid || req->from_seq > s->pt_seq ? ENGINE_LOG_FOREIGN
                                                                              : ENGINE_LOG_OK;
    if (req->res.log_rc != ENGINE_LOG_OK || req->from_seq == s->pt_seq)
        return open_end(r, rq, s, 0);
    if ((c = xrange_cmd(r, s, s->pt_uid, req->from_seq + 1, s->pt_seq)) == NULL) {
        req->res.log_rc = ENGINE_LOG_UNKNOWN;
        return open_end(r, rq, s, 0);
    }
    read_send(r, s, c, rq, open_replayed);
}

/* This instance follows s (its follow answered, or could not be asked: pt_ok 0). */
static void open_follow(rs_t *r, rs_req_t *rq, rs_sem_t *s)
{
    int was = s->watched;

    if (rq->req == NULL)
        return open_end(r, rq, s, 0);
    s->watched = 1;
    ev_start(r, s, was);
    if (!was) {
        rs__sub_watch(r, s, 1);
        if (r->sub.ac != NULL && s->subscribed)
            redisAsyncHandleWrite(r->sub.ac);
    }
    open_replay(r, rq, s);
}

static void open_followed(rs_t *r, rs_cmd_t *c, const redisReply *rep)
{
    rs_sem_t *s = read_end(r, c);

    (void)followed(s, rep);
    open_follow(r, c->rq, s);
}

/* The semaphore's row exists (no answer counts as "it may"): it is followed. */
static void open_exists(rs_t *r, rs_cmd_t *c, const redisReply *rep)
{
    rs_sem_t *s = read_end(r, c);
    rs_req_t *rq = c->rq;
    rs_cmd_t *f;

    if (rq->req == NULL)
        return open_end(r, rq, s, 0);
    if (rep != NULL && rep->type == REDIS_REPLY_INTEGER && rep->integer == 0)
        return open_end(r, rq, s, SEMA_ENOENT);
    if ((f = follow_cmd(r, s, RS_CMD_READ)) == NULL) {
        s->pt_ok = 0;
        return open_follow(r, rq, s);
    }
    read_send(r, s, f, rq, open_followed);
}

void rs__ev_open(rs_t *r, rs_req_t *rq)
{
    engine_req_t *req = rq->req;
    rs_args_t a = {0};
    size_t sl, kl;
    char *stem = rs__key_new(r, 's', req->name, req->name_len, "", &sl);
    char *km = stem != NULL ? rs__key_cat("", stem, sl, ":m", &kl) : NULL;
    rs_sem_t *s = km != NULL ? rs__sem_get(r, stem, sl) : NULL;
    rs_cmd_t *c = NULL;

    sema__free(stem);
    rq->state = RS_REQ_SENT;
    if (s != NULL && !(r->conn_once && r->cmd.state != RS_CONN_READY)) {
        rs__arg_str(&a, "EXISTS");
        rs__arg(&a, km, kl);
        c = rs__cmd_build(r, RS_CMD_READ, &a);
    }
    sema__free(km);
    if (s == NULL) {
        rs__fail(r, rq, BE_MSG_NOMEM, 0);
    } else if (c == NULL) { /* Redis is known to be down: it may exist, its point unknown */
        s->pt_ok = 0;
        open_follow(r, rq, s);
    } else {
        read_send(r, s, c, rq, open_exists);
    }
}
