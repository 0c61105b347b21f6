/* SPDX-License-Identifier: MIT */
/* redis_slots.c - Redis Cluster's key slots, slot map and redirects (redis_slots.h). */
#include "backends/redis/redis_slots.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- slots ---- */

uint16_t rs__slot_crc16(const char *p, size_t n)
{
    uint16_t crc = 0;

    for (size_t i = 0; i < n; i++) {
        crc ^= (uint16_t)((uint8_t)p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned rs__slot_of(const char *key, size_t n)
{
    const char *open = memchr(key, '{', n);
    const char *close;

    if (open != NULL) {
        close = memchr(open + 1, '}', n - (size_t)(open + 1 - key));
        if (close != NULL && close > open + 1)
            return rs__slot_crc16(open + 1, (size_t)(close - open - 1)) % RS_SLOTS;
    }
    return rs__slot_crc16(key, n) % RS_SLOTS;
}

/* ---- one tag per slot, ids that name their slot ---- */

void rs__slot_tags_make(rs_slot_tags_t *t)
{
    static const char digits[] = "0123456789abcdef";
    unsigned left = RS_SLOTS;
    char hex[8];

    memset(t->tag, 0xff, sizeof t->tag); /* (0xffffffff: no tag yet; no slot needs it) */
    for (uint32_t n = 0; left > 0 && n < UINT32_MAX; n++) {
        unsigned s;
        for (int i = 0; i < 8; i++) /* "%08x" of n */
            hex[i] = digits[(n >> (28 - 4 * i)) & 15];
        s = rs__slot_crc16(hex, 8) % RS_SLOTS;
        if (t->tag[s] == UINT32_MAX) {
            t->tag[s] = n;
            left--;
        }
    }
}

static const char id_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

void rs__slot_id_put(char *id, unsigned slot)
{
    id[0] = id_b64[(slot >> 12) & 3];
    id[1] = id_b64[(slot >> 6) & 63];
    id[2] = id_b64[slot & 63];
}

static int b64_val(char c)
{
    const char *p = c != '\0' ? strchr(id_b64, c) : NULL;
    return p != NULL ? (int)(p - id_b64) : -1;
}

int rs__slot_id_get(const char *id, size_t n)
{
    int a, b, c;

    if (n < 3 || (a = b64_val(id[0])) < 0 || a > 3 || (b = b64_val(id[1])) < 0 ||
        (c = b64_val(id[2])) < 0)
        return -1;
    return (a << 12) | (b << 6) | c;
}

/* ---- redirects ---- */

/* "HOST:PORT" (the last colon splits: an IPv6 host may be bare or in brackets) */
static int parse_addr(const char *s, size_t n, const char *from_host, rs_slot_addr_t *a)
{
    const char *colon = NULL;
    char num[8];
    char *end;
    long port;

    for (size_t i = n; i > 0 && colon == NULL; i--)
        if (s[i - 1] == ':')
            colon = s + i - 1;
    if (colon == NULL || (size_t)(s + n - colon - 1) == 0 ||
        (size_t)(s + n - colon - 1) >= sizeof num)
        return -1;
    memcpy(num, colon + 1, (size_t)(s + n - colon - 1));
    num[s + n - colon - 1] = '\0';
    port = strtol(num, &end, 10);
    if (*end != '\0' || port < 1 || port > 65535)
        return -1;
    if (colon - s >= 2 && s[0] == '[' && colon[-1] == ']') { /* [::1]:6379 */
        s++;
        n = (size_t)(colon - 1 - s);
    } else {
        n = (size_t)(colon - s);
    }
    if (n == 0) { /* ":6379": the node that answered */
        if (from_host == NULL || strlen(from_host) >= RS_HOST_MAX)
            return -1;
        memcpy(a->host, from_host, strlen(from_host) + 1);
    } else {
        if (n >= RS_HOST_MAX || memchr(s, '\0', n) != NULL)
            return -1;
        memcpy(a->host, s, n);
        a->host[n] = '\0';
    }
    a->port = (int)port;
    return 0;
}

/* One node of a list: HOST, HOST:PORT, [IPV6], [IPV6]:PORT or a bare IPv6 address. */
static int parse_node(const char *s, size_t n, int default_port, rs_slot_addr_t *a)
{
    char buf[RS_HOST_MAX + 8];
    const char *close = n > 0 && s[0] == '[' ? memchr(s, ']', n) : NULL;
    size_t colons = 0;
    int has_port;

    for (size_t i = 0; i < n; i++)
        colons += s[i] == ':';
    if (close != NULL)
        has_port = close + 1 < s + n;
    else
        has_port = colons == 1; /* more than one: a bare IPv6 address */
    if (n == 0 || n >= RS_HOST_MAX || (s[0] == '[' && close == NULL))
        return -1;
    snprintf(buf, sizeof buf, "%.*s%s%d", (int)n, s, has_port ? "" : ":",
             has_port ? 0 : default_port);
    if (has_port)
        buf[n] = '\0';
    return parse_addr(buf, strlen(buf), NULL, a);
}

int rs__slot_addrs(const char *s, size_t n, int default_port, rs_slot_addr_t *out)
{
    int k = 0;

    while (k < RS_SLOT_SEEDS_MAX) {
        const char *comma = memchr(s, ',', n);
        size_t len = comma ? (size_t)(comma - s) : n;
        if (parse_node(s, len, default_port, &out[k++]) != 0)
            return -1;
        if (comma == NULL)
            return k;
        s = comma + 1;
        n -= len + 1;
    }
    return -1;
}

int rs__slot_redirect(const char *err, size_t n, const char *from_host, rs_redirect_t *out)
{
    int kind;
    size_t i;
    unsigned long slot = 0;
    const char *sp;

    if (n > 6 && memcmp(err, "MOVED ", 6) == 0) {
        kind = RS_REDIR_MOVED;
        i = 6;
    } else if (n > 4 && memcmp(err, "ASK ", 4) == 0) {
        kind = RS_REDIR_ASK;
        i = 4;
    } else {
        return RS_REDIR_NONE;
    }
    sp = memchr(err + i, ' ', n - i);
    if (sp == NULL || sp == err + i || sp - (err + i) > 5)
        return RS_REDIR_NONE;
    for (; err + i < sp; i++) {
        if (err[i] < '0' || err[i] > '9')
            return RS_REDIR_NONE;
        slot = slot * 10 + (unsigned long)(err[i] - '0');
    }
    if (slot >= RS_SLOTS || parse_addr(sp + 1, n - (size_t)(sp + 1 - err), from_host, &out->to))
        return RS_REDIR_NONE;
    out->kind = kind;
    out->slot = (unsigned)slot;
    return kind;
}

/* ---- the slot map ---- */

void rs__slotmap_clear(rs_slotmap_t *m)
{
    memset(m->owner, 0xff, sizeof m->owner);
    m->nnodes = 0;
    m->covered = 0;
}

int rs__slotmap_node(rs_slotmap_t *m, const char *host, int port)
{
    size_t len = strlen(host);

    for (int i = 0; i < m->nnodes; i++)
        if (m->nodes[i].port == port && strcmp(m->nodes[i].host, host) == 0)
            return i;
    if (m->nnodes == RS_SLOT_NODES_MAX || len == 0 || len >= RS_HOST_MAX || port < 1 ||
        port > 65535)
        return -1;
    memcpy(m->nodes[m->nnodes].host, host, len + 1);
    m->nodes[m->nnodes].port = port;
    return m->nnodes++;
}

static void assign(rs_slotmap_t *m, long lo, long hi, int node)
{
    for (long s = lo; s <= hi; s++) {
        if (m->owner[s] == RS_SLOT_NONE)
            m->covered++;
        m->owner[s] = (uint16_t)node;
    }
}

static int as_long(const redisReply *r, long *v)
{
    char *end;

    if (r->type == REDIS_REPLY_INTEGER) {
        *v = (long)r->integer;
        return 0;
    }
    if (r->type != REDIS_REPLY_STRING || r->len == 0)
        return -1;
    *v = strtol(r->str, &end, 10);
    return *end == '\0' ? 0 : -1;
}

static int is_str(const redisReply *r, const char *s)
{
    return r->type == REDIS_REPLY_STRING && r->len == strlen(s) && memcmp(r->str, s, r->len) == 0;
}

/* The value of `key` in a map sent as a flat array (RESP2), or NULL. */
static const redisReply *field(const redisReply *map, const char *key)
{
    if (map->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < map->elements; i += 2)
        if (is_str(map->element[i], key))
            return map->element[i + 1];
    return NULL;
}

/* The slot range lo..hi checked. */
static int range_ok(const redisReply *a, const redisReply *b, long *lo, long *hi)
{
    return as_long(a, lo) == 0 && as_long(b, hi) == 0 && *lo >= 0 && *lo <= *hi && *hi < RS_SLOTS;
}

/* A shard's primary as a node of the map: its index, -2 when the shard has none, -1 when the
 * reply is malformed or the map is full. */
static int shard_primary(rs_slotmap_t *m, const redisReply *nodes, const char *from_host)
{
    for (size_t i = 0; i < nodes->elements; i++) {
        const redisReply *n = nodes->element[i];
        const redisReply *role = field(n, "role"), *ep = field(n, "endpoint");
        const redisReply *ip = field(n, "ip"), *port = field(n, "port");
        long p;
        if (role == NULL || !is_str(role, "master"))
            continue;
        if (port == NULL || as_long(port, &p) != 0)
            return -1;
        if (ep != NULL && ep->type == REDIS_REPLY_STRING && ep->len > 0 && !is_str(ep, "?"))
            return rs__slotmap_node(m, ep->str, (int)p);
        if (ip != NULL && ip->type == REDIS_REPLY_STRING && ip->len > 0)
            return rs__slotmap_node(m, ip->str, (int)p);
        return from_host != NULL ? rs__slotmap_node(m, from_host, (int)p) : -1;
    }
    return -2;
}

int rs__slotmap_from_shards(rs_slotmap_t *m, const redisReply *rep, const char *from_host)
{
    rs__slotmap_clear(m);
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY)
        return -1;
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *slots = field(rep->element[i], "slots");
        const redisReply *nodes = field(rep->element[i], "nodes");
        int node;
        if (slots == NULL || nodes == NULL || slots->type != REDIS_REPLY_ARRAY ||
            nodes->type != REDIS_REPLY_ARRAY || slots->elements % 2 != 0)
            goto bad;
        node = shard_primary(m, nodes, from_host);
        if (node == -1)
            goto bad;
        for (size_t j = 0; j < slots->elements; j += 2) {
            long lo, hi;
            if (!range_ok(slots->element[j], slots->element[j + 1], &lo, &hi))
                goto bad;
            if (node >= 0)
                assign(m, lo, hi, node);
        }
    }
    return 0;
bad:
    rs__slotmap_clear(m);
    return -1;
}

int rs__slotmap_from_slots(rs_slotmap_t *m, const redisReply *rep, const char *from_host)
{
    rs__slotmap_clear(m);
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY)
        return -1;
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *e = rep->element[i], *p;
        const char *host;
        long lo, hi, port;
        int node;
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            !range_ok(e->element[0], e->element[1], &lo, &hi))
            goto bad;
        p = e->element[2];
        if (p->type != REDIS_REPLY_ARRAY || p->elements < 2 ||
            p->element[0]->type != REDIS_REPLY_STRING || as_long(p->element[1], &port) != 0)
            goto bad;
        host =
            p->element[0]->len > 0 && !is_str(p->element[0], "?") ? p->element[0]->str : from_host;
        if (host == NULL || (node = rs__slotmap_node(m, host, (int)port)) < 0)
            goto bad;
        assign(m, lo, hi, node);
    }
    return 0;
bad:
    rs__slotmap_clear(m);
    return -1;
}

int rs__slotmap_moved(rs_slotmap_t *m, const rs_redirect_t *mv)
{
    int node = rs__slotmap_node(m, mv->to.host, mv->to.port);

    if (node >= 0)
        assign(m, (long)mv->slot, (long)mv->slot, node);
    return node;
}

const rs_slot_addr_t *rs__slotmap_owner(const rs_slotmap_t *m, unsigned slot)
{
    if (slot >= RS_SLOTS || m->owner[slot] == RS_SLOT_NONE)
        return NULL;
    return &m->nodes[m->owner[slot]];
}
