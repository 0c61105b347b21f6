/* SPDX-License-Identifier: MIT */
/* bench_mix.c - `sema bench -m mix`: one steady load that touches every kind of semad state,
 * for soaks: acquire+release pairs, renewals, idempotent retries, keyed locks on ever new
 * keys, leases left to expire, long-polls that time out, tickets read once and abandoned,
 * event streams opened and closed, semaphores created and deleted. Every answer is checked
 * against the statuses its step expects. */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "loadgen/bench_load.h"

#define EXPIRE_TTL_MS 500   /* expire: a lease nobody releases */
#define POLL_TIMEOUT_MS 100 /* poll: a long-poll on the full semaphore */
#define POLL_TTL_MS 1000    /* ... whose grant, when it gets one, is left to expire */
#define TICKET_KEEP_MS 1000 /* ticket: read once, then abandoned after this */
#define STREAM_MS 1000      /* stream: open this long, then closed */
#define CHURN_NAMES 1000    /* churn: semaphores NAME-t0..NAME-t999 created and deleted */
#define COMPLAINTS_MAX 10   /* unexpected answers described on stderr */

enum { PAIR, RENEW, RETRY, LOCK, EXPIRE, POLL, TICKET, STREAM, CHURN };

const char *const bench_mix_kind_names[BENCH_MIX_KINDS] = {
    "pair", "renew", "retry", "lock", "expire", "poll", "ticket", "stream", "churn"};

/* Operations of each kind in every 100. */
static const unsigned kind_weight[BENCH_MIX_KINDS] = {40, 10, 10, 12, 5, 8, 8, 2, 5};

/* splitmix64: the kind of operation n, the same in every run. */
static unsigned pick_kind(uint64_t n)
{
    uint64_t z = (n + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    unsigned r = (unsigned)((z ^ (z >> 31)) % 100), k = 0;
    while (r >= kind_weight[k])
        r -= kind_weight[k++];
    return k;
}

/* ---- requests ---- */

static void send_h(conn_t *c, const char *method, const char *path, const char *headers,
                   const char *body)
{
    char req[2048];
    c->untimed = 0;
    bench_load__send(
        c, req, bench_format_request_h(req, sizeof(req), c->ld->o, method, path, headers, body));
}

static void send_plain(conn_t *c, const char *method, const char *path, const char *body)
{
    send_h(c, method, path, "", body);
}

/* POST /v1/semaphores/NAME[SUFFIX]/acquire with ttl_ms (and timeout_ms when >= 0). */
static void send_acquire(conn_t *c, const char *suffix, int64_t ttl_ms, int64_t timeout_ms,
                         const char *headers)
{
    char path[BENCH_NAME_MAX + 64], body[128];
    snprintf(path, sizeof(path), "/v1/semaphores/%s%s/acquire", c->ld->o->name, suffix);
    if (timeout_ms >= 0)
        snprintf(body, sizeof(body), "{\"ttl_ms\":%" PRId64 ",\"timeout_ms\":%" PRId64 "}", ttl_ms,
                 timeout_ms);
    else
        snprintf(body, sizeof(body), "{\"ttl_ms\":%" PRId64 "}", ttl_ms);
    send_h(c, "POST", path, headers, body);
}

/* DELETE /v1/leases/ID, or POST /v1/leases/ID/renew. */
static void send_lease(conn_t *c, int renew)
{
    char path[BENCH_ID_MAX + 32], body[64];
    snprintf(path, sizeof(path), "/v1/leases/%s%s", c->lease, renew ? "/renew" : "");
    snprintf(body, sizeof(body), "{\"ttl_ms\":%" PRId64 "}", c->ld->o->ttl_ms);
    send_plain(c, renew ? "POST" : "DELETE", path, renew ? body : NULL);
}

/* The churn's semaphore: PUT (capacity 2), or DELETE. */
static void send_churn_sem(conn_t *c, int put)
{
    char path[BENCH_NAME_MAX + 64];
    snprintf(path, sizeof(path), "/v1/semaphores/%s-t%" PRIu64, c->ld->o->name,
             c->mseq % CHURN_NAMES);
    send_plain(c, put ? "PUT" : "DELETE", path, put ? "{\"capacity\":2}" : NULL);
}

static void send_first(conn_t *c)
{
    const bench_opts_t *o = c->ld->o;
    char path[BENCH_NAME_MAX + 64], body[128], hdr[BENCH_NAME_MAX + 64];
    switch (c->kind) {
    case PAIR:
    case RENEW:
        send_acquire(c, "", o->ttl_ms, -1, "");
        return;
    case RETRY:
        snprintf(hdr, sizeof(hdr), "Idempotency-Key: %s-r%" PRIu64 "\r\n", o->name, c->mseq);
        send_acquire(c, "", o->ttl_ms, -1, hdr);
        return;
    case LOCK:
        snprintf(path, sizeof(path), "/v1/locks/%s-k%" PRIu64 "/acquire", o->name, c->mseq);
        snprintf(body, sizeof(body), "{\"mode\":\"%s\",\"ttl_ms\":%" PRId64 "}",
                 c->mseq & 1 ? "shared" : "exclusive", o->ttl_ms);
        send_plain(c, "POST", path, body);
        return;
    case EXPIRE:
        send_acquire(c, "", EXPIRE_TTL_MS, -1, "");
        return;
    case POLL:
        send_acquire(c, "-full", POLL_TTL_MS, POLL_TIMEOUT_MS, "");
        c->untimed = 1; /* its time is the timeout's */
        return;
    case TICKET:
        snprintf(path, sizeof(path), "/v1/semaphores/%s-full/tickets", o->name);
        snprintf(body, sizeof(body), "{\"ttl_ms\":%d,\"keepalive_ms\":%d}", POLL_TTL_MS,
                 TICKET_KEEP_MS);
        send_plain(c, "POST", path, body);
        return;
    case STREAM:
        snprintf(path, sizeof(path), "/v1/semaphores/%s/events", o->name);
        send_plain(c, "GET", path, NULL);
        c->step = STEP_STREAM;
        return;
    default:
        send_churn_sem(c, 1);
    }
}

void bench_mix_start(conn_t *c)
{
    load_t *ld = c->ld;
    c->mseq = ld->mix_seq++;
    c->kind = pick_kind(c->mseq);
    c->mstep = 0;
    c->step = STEP_MIX;
    c->pair_start_ns = uv_hrtime();
    send_first(c);
}

/* ---- answers ---- */

/* An answer its step did not expect: counted, and the first few described. */
static int unexpected(conn_t *c, int status)
{
    load_t *ld = c->ld;
    ld->res->proto_errors++;
    if (ld->complaints++ < COMPLAINTS_MAX)
        fprintf(stderr, "sema bench: mix %s, step %u: answered %d: %.200s\n",
                bench_mix_kind_names[c->kind], c->mstep, status, c->body);
    return 0;
}

/* A lease in the answer: kept in c->lease (or, `same`, checked to be the one kept). */
static int take_lease(conn_t *c, int status, int same)
{
    char id[BENCH_ID_MAX];
    if (status != 200 || bench_json_str(c->body, "lease", id, sizeof(id)) == 0)
        return -1;
    if (same)
        return strcmp(id, c->lease) == 0 ? 0 : -1;
    memcpy(c->lease, id, sizeof(id));
    return 0;
}

/* The step after an answer: 1 sent (the operation goes on), 0 done, -1 unexpected. */
static int next_step(conn_t *c, int status)
{
    unsigned step = c->mstep++;
    switch (c->kind) {
    case PAIR:
    case LOCK:
        if (step == 0 && take_lease(c, status, 0) == 0)
            return send_lease(c, 0), 1;
        return step == 1 && status == 204 ? 0 : -1;
    case RENEW:
        if (step == 0 && take_lease(c, status, 0) == 0)
            return send_lease(c, 1), 1;
        if ((step == 1 || step == 2) && take_lease(c, status, 1) == 0)
            return send_lease(c, step == 1), 1;
        return step == 3 && status == 204 ? 0 : -1;
    case RETRY:
        if (step == 0 && take_lease(c, status, 0) == 0)
            return send_first(c), 1; /* the same request, as after a lost answer */
        if (step == 1 && take_lease(c, status, 1) == 0)
            return send_lease(c, 0), 1;
        return step == 2 && status == 204 ? 0 : -1;
    case EXPIRE:
        return status == 200 ? 0 : -1;
    case POLL:
        return status == 200 || status == 409 ? 0 : -1; /* granted, or timed out */
    case TICKET:
        if (step == 0 && status == 201 &&
            bench_json_str(c->body, "ticket", c->ticket, sizeof(c->ticket)) > 0) {
            char path[BENCH_ID_MAX + 16];
            snprintf(path, sizeof(path), "/v1/tickets/%s", c->ticket);
            return send_plain(c, "GET", path, NULL), 1; /* then never again */
        }
        return step == 1 && (status == 200 || status == 410) ? 0 : -1;
    case STREAM:
        return -1; /* an answer with a body: the stream was refused */
    default:       /* CHURN */
        if (step == 0 && (status == 201 || status == 200)) {
            char suffix[48];
            snprintf(suffix, sizeof(suffix), "-t%" PRIu64, c->mseq % CHURN_NAMES);
            return send_acquire(c, suffix, c->ld->o->ttl_ms, -1, ""), 1;
        }
        if (step == 1 && status == 200)
            return send_churn_sem(c, 0), 1;
        return step == 2 && status == 204 ? 0 : -1;
    }
}

int bench_mix_answer(conn_t *c, int status, uint64_t now)
{
    int rc = next_step(c, status);
    if (rc > 0)
        return 1;
    if (rc < 0)
        return unexpected(c, status);
    c->ld->res->mix_ops[c->kind]++;
    bench_load__op_done(c->ld, now, c->pair_start_ns);
    return 0;
}

/* ---- event streams ---- */

static void on_hold(uv_timer_t *t)
{
    conn_t *c = t->data;
    if (c->open && c->step == STEP_STREAM) {
        c->step = STEP_MIX; /* no stream open on it any more */
        bench_load__close(c, BENCH_CLOSE_PLANNED);
    }
}

void bench_mix_stream_open(conn_t *c, uint64_t now)
{
    bench_load__answered(c, 200, now);
    c->ld->res->mix_ops[STREAM]++;
    bench_load__op_done(c->ld, now, c->pair_start_ns);
    uv_timer_start(&c->hold, on_hold, STREAM_MS, 0);
}

void bench_mix_init(load_t *ld)
{
    for (unsigned i = 0; i < ld->o->conns; i++) {
        uv_timer_init(&ld->loop, &ld->conns[i].hold);
        ld->conns[i].hold.data = &ld->conns[i];
    }
}

void bench_mix_close(load_t *ld)
{
    for (unsigned i = 0; i < ld->o->conns; i++)
        if (!uv_is_closing((uv_handle_t *)&ld->conns[i].hold))
            uv_close((uv_handle_t *)&ld->conns[i].hold, NULL);
}
