/* SPDX-License-Identifier: MIT */
/* engine_json.c - the engine's results in the wire format of the semad contract. */
#include "mem_internal.h"

#include <string.h>

/* Longest holders/waiters array in one state reply; the counts stay exact. */
#define STATE_LIST_MAX 1000

static json_t *str_or_null(const char *s)
{
    return s != NULL ? json_string(s) : json_null();
}

static const char *lock_mode(const esem_t *s, uint64_t weight)
{
    return weight == s->capacity && s->capacity > 1 ? "exclusive" : "shared";
}

json_t *engine__json_lease(const engine_t *e, const elease_t *l)
{
    const esem_t *s = l->sem;
    json_t *o = json_pack("{s:s,s:s%,s:I,s:I,s:I,s:I,s:I,s:o}", "lease", l->id, "name", s->name,
                          (size_t)s->name_len, "weight", (json_int_t)l->weight, "fence",
                          (json_int_t)l->fence, "ttl_ms", (json_int_t)l->ttl_ms, "expires_at",
                          (json_int_t)l->expires_at_ms, "acquired_at",
                          (json_int_t)l->acquired_at_ms, "owner", str_or_null(l->owner));

    (void)e;
    if (o != NULL && (s->flags & ESEM_LOCK)) {
        json_object_set_new(o, "key", json_stringn(s->name, s->name_len));
        json_object_set_new(o, "mode", json_string(lock_mode(s, l->weight)));
    }
    return o;
}

static json_t *holder_json(const esem_t *s, const elease_t *l)
{
    json_t *o =
        json_pack("{s:s,s:I,s:o,s:I,s:I,s:I}", "lease", l->id, "weight", (json_int_t)l->weight,
                  "owner", str_or_null(l->owner), "acquired_at", (json_int_t)l->acquired_at_ms,
                  "expires_at", (json_int_t)l->expires_at_ms, "fence", (json_int_t)l->fence);

    if (o != NULL && (s->flags & ESEM_LOCK))
        json_object_set_new(o, "mode", json_string(lock_mode(s, l->weight)));
    return o;
}

static json_t *waiter_json(const esem_t *s, const ereq_t *er, uint64_t pos)
{
    const char *owner = er->req->owner;
    json_t *o = json_pack(
        "{s:I,s:I,s:o,s:I}", "position", (json_int_t)pos, "weight", (json_int_t)er->weight, "owner",
        owner && owner[0] ? json_string(owner) : json_null(), "since", (json_int_t)er->since_ms);

    if (o == NULL)
        return NULL;
    if (er->kind == EKIND_WAIT_IDLE)
        json_object_set_new(o, "kind", json_string("wait_idle"));
    if (s->flags & ESEM_LOCK)
        json_object_set_new(o, "mode", json_string(lock_mode(s, er->weight)));
    return o;
}

/* Fill "holders" and "waiters" of `o`; returns 0 or -1 when out of memory. */
static int add_lists(json_t *o, const esem_t *s)
{
    json_t *h = json_array(), *w = json_array();
    uint64_t n = 0;
    int truncated = 0;

    if (h == NULL || w == NULL || json_object_set_new(o, "holders", h) ||
        json_object_set_new(o, "waiters", w)) {
        return -1;
    }
    for (const elist_t *x = s->holders.next; x != &s->holders; x = x->next) {
        if (json_array_size(h) == STATE_LIST_MAX) {
            truncated = 1;
            break;
        }
        if (json_array_append_new(h, holder_json(s, ENGINE__CONTAINER(x, elease_t, link))))
            return -1;
    }
    for (const elist_t *x = s->waiters.next; x != &s->waiters; x = x->next) {
        if (n == STATE_LIST_MAX) {
            truncated = 1;
            break;
        }
        if (json_array_append_new(w, waiter_json(s, ENGINE__CONTAINER(x, ereq_t, link), n++)))
            return -1;
    }
    if (truncated)
        json_object_set_new(o, "truncated", json_true());
    return 0;
}

json_t *engine__json_state(const engine_t *e, const esem_t *s)
{
    json_t *o =
        json_pack("{s:s%,s:I,s:I,s:I,s:I,s:I,s:I}", "name", s->name, (size_t)s->name_len,
                  "capacity", (json_int_t)s->capacity, "available", (json_int_t)s->available,
                  "held", (json_int_t)s->held, "fence", (json_int_t)s->fence, "waiting",
                  (json_int_t)s->nwaiters, "waiting_weight", (json_int_t)s->waiting);

    (void)e;
    if (o == NULL)
        return NULL;
    if (s->flags & ESEM_LEGACY)
        json_object_set_new(o, "legacy", json_true());
    if (add_lists(o, s) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *engine__json_lock(const engine_t *e, const esem_t *s)
{
    json_t *o = json_pack("{s:s%,s:I}", "key", s->name, (size_t)s->name_len, "readers",
                          (json_int_t)s->capacity);

    (void)e;
    if (o == NULL)
        return NULL;
    if (add_lists(o, s) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *engine__json_legacy(const esem_t *s)
{
    return json_pack("{s:s%,s:I}", "name", s->name, (size_t)s->name_len, "value",
                     (json_int_t)s->available);
}

json_t *engine__json_list_item(const esem_t *s)
{
    return json_pack("{s:s%,s:I,s:I,s:I,s:I}", "name", s->name, (size_t)s->name_len, "capacity",
                     (json_int_t)s->capacity, "available", (json_int_t)s->available, "held",
                     (json_int_t)s->held, "waiting", (json_int_t)s->nwaiters);
}

/* ---- the lease as text, without building a JSON tree (the acquire hot path) ---- */

enum { LEASE_TEXT_MAX = 512 };

typedef struct {
    char buf[LEASE_TEXT_MAX];
    size_t n;
    int bad; /* did not fit, or a string needs the JSON form */
} ltext_t;

static void lt_put(ltext_t *t, const char *s, size_t len)
{
    if (len > sizeof t->buf - t->n) {
        t->bad = 1;
        return;
    }
    memcpy(t->buf + t->n, s, len);
    t->n += len;
}

/* A JSON string that needs no escaping: printable ASCII without '"' and '\'. */
static void lt_str(ltext_t *t, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
            t->bad = 1;
            return;
        }
    }
    lt_put(t, "\"", 1);
    lt_put(t, s, len);
    lt_put(t, "\"", 1);
}

/* An integer exactly as a json_int_t holding `v` prints (two digits per division). */
static void lt_int(ltext_t *t, json_int_t v)
{
    static const char pairs[] = "00010203040506070809101112131415161718192021222324252627282930"
                                "31323334353637383940414243444546474849505152535455565758596061"
                                "6263646566676869707172737475767778798081828384858687888990919293"
                                "949596979899";
    char num[24], *p = num + sizeof num;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;

    while (u >= 100) {
        unsigned d = (unsigned)(u % 100) * 2;
        u /= 100;
        *--p = pairs[d + 1];
        *--p = pairs[d];
    }
    if (u >= 10) {
        *--p = pairs[u * 2 + 1];
        *--p = pairs[u * 2];
    } else {
        *--p = (char)('0' + u);
    }
    if (v < 0)
        *--p = '-';
    lt_put(t, p, (size_t)(num + sizeof num - p));
}

#define LT_KEY(t, k) lt_put((t), k, sizeof(k) - 1)

char *engine__text_lease(const elease_t *l, size_t *len)
{
    const esem_t *s = l->sem;
    ltext_t t;
    char *out;

    t.n = 0;
    t.bad = 0;
    LT_KEY(&t, "{\"lease\":");
    lt_str(&t, l->id, strlen(l->id));
    LT_KEY(&t, ",\"name\":");
    lt_str(&t, s->name, s->name_len);
    LT_KEY(&t, ",\"weight\":");
    lt_int(&t, (json_int_t)l->weight);
    LT_KEY(&t, ",\"fence\":");
    lt_int(&t, (json_int_t)l->fence);
    LT_KEY(&t, ",\"ttl_ms\":");
    lt_int(&t, (json_int_t)l->ttl_ms);
    LT_KEY(&t, ",\"expires_at\":");
    lt_int(&t, (json_int_t)l->expires_at_ms);
    LT_KEY(&t, ",\"acquired_at\":");
    lt_int(&t, (json_int_t)l->acquired_at_ms);
    LT_KEY(&t, ",\"owner\":");
    if (l->owner != NULL)
        lt_str(&t, l->owner, strlen(l->owner));
    else
        LT_KEY(&t, "null");
    if (s->flags & ESEM_LOCK) {
        const char *mode = lock_mode(s, l->weight);
        LT_KEY(&t, ",\"key\":");
        lt_str(&t, s->name, s->name_len);
        LT_KEY(&t, ",\"mode\":");
        lt_str(&t, mode, strlen(mode));
    }
    LT_KEY(&t, "}");
    if (t.bad || (out = sema__malloc(t.n + 1)) == NULL)
        return NULL;
    memcpy(out, t.buf, t.n);
    out[t.n] = '\0';
    *len = t.n;
    return out;
}
