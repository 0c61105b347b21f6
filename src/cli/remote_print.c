/* SPDX-License-Identifier: MIT */
/* remote_print.c - how the remote verbs print leases and semaphores for people (and as one
 * line of JSON with --json). */
#include "cli/remote.h"

#include <inttypes.h>
#include <stdio.h>
#include <time.h>

int64_t remote_epoch_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void remote_print_lease(const remote_opts_t *o, const sema_lease_t *l)
{
    if (!o->json) {
        printf("%s\n", l->id);
        return;
    }
    json_t *j = json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:I}", "lease", l->id, "name", l->name,
                          "weight", (json_int_t)l->weight, "fence", (json_int_t)l->fence, "ttl_ms",
                          (json_int_t)l->ttl_ms, "expires_at", (json_int_t)l->expires_at_ms,
                          "acquired_at", (json_int_t)l->acquired_at_ms);
    if (j != NULL && l->mode != 0)
        json_object_set_new(j, "mode",
                            json_string(l->mode == SEMA_LOCK_SHARED ? "shared" : "exclusive"));
    if (j != NULL)
        json_dumpf(j, stdout, JSON_COMPACT);
    printf("\n");
    json_decref(j);
}

static const char *or_dash(const char *s)
{
    return s != NULL ? s : "-";
}

static void print_holders(json_t *doc, int64_t now)
{
    json_t *arr = json_object_get(doc, "holders"), *h;
    size_t i;

    printf("holders    %zu\n", json_array_size(arr));
    json_array_foreach(arr, i, h)
    {
        json_int_t exp = json_integer_value(json_object_get(h, "expires_at"));
        printf("  %s  weight %" JSON_INTEGER_FORMAT "  fence %" JSON_INTEGER_FORMAT
               "  expires in %.1fs  owner %s\n",
               json_string_value(json_object_get(h, "lease")),
               json_integer_value(json_object_get(h, "weight")),
               json_integer_value(json_object_get(h, "fence")), (double)(exp - now) / 1000.0,
               or_dash(json_string_value(json_object_get(h, "owner"))));
    }
    arr = json_object_get(doc, "waiters");
    printf("waiters    %zu\n", json_array_size(arr));
    json_array_foreach(arr, i, h)
    {
        json_int_t since = json_integer_value(json_object_get(h, "since"));
        const char *kind = json_string_value(json_object_get(h, "kind"));
        /* a ticket waits without a connection; a wait-idle takes nothing. Counted from 1
         * (#1 is next), as a ticket's own position is; the JSON's counts from 0. */
        printf("  #%" JSON_INTEGER_FORMAT "  weight %" JSON_INTEGER_FORMAT
               "  waiting %.1fs  owner %s%s%s\n",
               json_integer_value(json_object_get(h, "position")) + 1,
               json_integer_value(json_object_get(h, "weight")),
               since > 0 ? (double)(now - since) / 1000.0 : 0.0,
               or_dash(json_string_value(json_object_get(h, "owner"))), kind != NULL ? "  " : "",
               kind != NULL ? kind : "");
    }
}

void remote_print_state(const char *json)
{
    json_t *doc = json_loads(json, 0, NULL);
    if (doc == NULL)
        return;
    printf("name       %s\n", or_dash(json_string_value(json_object_get(doc, "name"))));
    static const char *const fields[] = {"capacity", "available", "held", "fence"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        printf("%-10s %" JSON_INTEGER_FORMAT "\n", fields[i],
               json_integer_value(json_object_get(doc, fields[i])));
    remote_print_limits(doc);
    print_holders(doc, remote_epoch_ms());
    json_decref(doc);
}

/* The limits and tenants of a state document (only what it has). */
void remote_print_limits(json_t *doc)
{
    static const char *const fields[] = {"tenant_max", "rate_per_s", "rate_burst", "tokens"};
    json_t *ts = json_object_get(doc, "tenants"), *t;
    size_t i;

    for (i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (json_object_get(doc, fields[i]) != NULL)
            printf("%-10s %" JSON_INTEGER_FORMAT "\n", fields[i],
                   json_integer_value(json_object_get(doc, fields[i])));
    if (json_array_size(ts) == 0)
        return;
    printf("tenants    %zu\n", json_array_size(ts));
    json_array_foreach(ts, i, t)
    {
        const char *name = json_string_value(json_object_get(t, "tenant"));
        printf("  %-20s held %" JSON_INTEGER_FORMAT "  waiting %" JSON_INTEGER_FORMAT
               " (weight %" JSON_INTEGER_FORMAT ")\n",
               name != NULL ? name : "(none)", json_integer_value(json_object_get(t, "held")),
               json_integer_value(json_object_get(t, "waiting")),
               json_integer_value(json_object_get(t, "waiting_weight")));
    }
}
