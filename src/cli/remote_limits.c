/* SPDX-License-Identifier: MIT */
/* remote_limits.c - a NAME that lists several semaphores ("gpu:2,db:1") for `sema acquire`
 * and `sema run`: taken all at once, as one lease. */
#include "cli/remote.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "NAME:W": W when the text after the last ':' is a whole number >= 1 (*colon set), else the
 * whole text is the name. */
static int split_weight(char *item, uint64_t *w, char **colon)
{
    char *c = strrchr(item, ':'), *end;

    *colon = NULL;
    *w = 1;
    if (c == NULL || c[1] < '0' || c[1] > '9')
        return 0;
    unsigned long long v = strtoull(c + 1, &end, 10);
    if (*end != '\0' || v == 0 || v > (1ull << 53))
        return -1;
    *w = v;
    *colon = c;
    *c = '\0';
    return 0;
}

int remote_parse_parts(remote_opts_t *o)
{
    const char *spec = o->pos[0];
    char *save = NULL, *colon = NULL;
    size_t n = 0;

    if (strchr(spec, ',') == NULL && strchr(spec, ':') == NULL)
        return 0;
    if (strlen(spec) >= sizeof o->parts_buf) {
        fprintf(stderr, "sema %s: '%.40s...' is too long\n", o->verb, spec);
        return CLI_EXIT_USAGE;
    }
    snprintf(o->parts_buf, sizeof o->parts_buf, "%s", spec);
    for (char *it = strtok_r(o->parts_buf, ",", &save); it != NULL;
         it = strtok_r(NULL, ",", &save)) {
        uint64_t w;
        if (n == SEMA_CLIENT_PARTS_MAX || split_weight(it, &w, &colon) != 0 || it[0] == '\0') {
            fprintf(stderr,
                    "sema %s: bad semaphores '%s': NAME[:W],NAME[:W]... (at most %d, W a "
                    "whole number >= 1)\n",
                    o->verb, spec, SEMA_CLIENT_PARTS_MAX);
            return CLI_EXIT_USAGE;
        }
        o->parts[n].name = it;
        o->parts[n++].weight = w;
    }
    if (n == 1 && colon == NULL)
        return 0; /* a name with a ':' in it and no weight */
    if (n == 1) {
        if (o->weight != 0 && o->weight != o->parts[0].weight) {
            fprintf(stderr, "sema %s: two weights: %s and -w %llu\n", o->verb, spec,
                    (unsigned long long)o->weight);
            return CLI_EXIT_USAGE;
        }
        o->pos[0] = (char *)o->parts[0].name;
        o->weight = o->parts[0].weight;
        return 0;
    }
    if (o->weight != 0 || o->capacity != 0) {
        fprintf(stderr,
                "sema %s: -w and -c are for one semaphore; give each one's weight as "
                "NAME:W (and create them with `sema create`)\n",
                o->verb);
        return CLI_EXIT_USAGE;
    }
    o->nparts = n;
    return 0;
}

json_t *remote_parts_json(const sema_lease_part_t *parts, size_t n, int fenced)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr != NULL && i < n; i++) {
        json_t *p =
            json_pack("{s:s,s:I}", "name", parts[i].name, "weight", (json_int_t)parts[i].weight);
        if (fenced && p != NULL)
            json_object_set_new(p, "fence", json_integer((json_int_t)parts[i].fence));
        json_array_append_new(arr, p);
    }
    return arr;
}

json_t *remote_multi_lease_json(const sema_lease_t *l, const sema_lease_part_t *parts, size_t n)
{
    json_t *fences = json_object();
    for (size_t i = 0; fences != NULL && i < n; i++)
        json_object_set_new(fences, parts[i].name, json_integer((json_int_t)parts[i].fence));
    return json_pack("{s:s,s:o,s:o,s:I,s:I,s:I}", "lease", l->id, "semaphores",
                     remote_parts_json(parts, n, 1), "fences", fences, "ttl_ms",
                     (json_int_t)l->ttl_ms, "expires_at", (json_int_t)l->expires_at_ms,
                     "acquired_at", (json_int_t)l->acquired_at_ms);
}

static void print_multi(const remote_opts_t *o, const sema_multi_lease_t *m)
{
    if (!o->json) {
        printf("%s\n", m->lease.id);
        return;
    }
    json_t *j = remote_multi_lease_json(&m->lease, m->parts, m->nparts);
    if (j != NULL)
        json_dumpf(j, stdout, JSON_COMPACT);
    printf("\n");
    json_decref(j);
}

int remote_acquire_parts(remote_opts_t *o, sema_client_t *c, const sema_acquire_opts_t *ao)
{
    sema_client_error_t e;
    sema_multi_lease_t m;
    int rc = sema_client_acquire_all(c, o->parts, o->nparts, ao, &m, &e);

    if (rc != 0)
        return remote_fail(o, o->pos[0], rc, &e);
    print_multi(o, &m);
    return CLI_EXIT_OK;
}
