/* SPDX-License-Identifier: MIT */
/* backends.c - the list of the engine's back ends, found by name (see backends.h). */
#include "backends/backends.h"

#include <stdio.h>
#include <string.h>

static const engine_backend_t *const backends[] = {&engine_backend_embedded};

const engine_backend_t *backends_find(const char *name, char *errbuf, size_t errlen)
{
    if (name == NULL)
        return backends[0];
#ifdef SEMA_WITH_REDIS
    /* every redis scheme (rediss:// too): the back end says what it serves, or why not */
    if (strncmp(name, "redis", 5) == 0 && strstr(name, "://") != NULL)
        return &engine_backend_redis;
#endif
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (strcmp(backends[i]->name, name) == 0)
            return backends[i];
    snprintf(errbuf, errlen,
             "unknown engine \"%s\" (embedded, redis://HOST[:PORT][/DB], "
             "redis+sentinel://HOST[:PORT][,HOST[:PORT]...]/MASTER_NAME or "
             "redis+cluster://HOST[:PORT][,HOST[:PORT]...])",
             name);
    return NULL;
}
