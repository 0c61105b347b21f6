/* SPDX-License-Identifier: MIT */
/* backends.h - the engine's back ends, and the one that the name `semad --engine` gives
 * selects. Each is a table of functions (engine/backend.h); whoever opens the engine (semad's
 * main, the tests, the benchmarks) finds one here and hands it to engine_new(). */
#ifndef SEMAD_BACKENDS_H
#define SEMAD_BACKENDS_H

#include <stddef.h>

#include "engine/backend.h"

extern const engine_backend_t engine_backend_embedded; /* embedded/: in memory + the store */
extern const engine_backend_t engine_backend_redis;    /* redis/: the state in Redis */

/* The back end `name` selects: "embedded" (also for NULL), or the Redis one for a Redis
 * address (redis://... or redis+sentinel://..., which it parses itself when it opens).
 * NULL, with a message naming the choices in errbuf, when there is none. */
const engine_backend_t *backends_find(const char *name, char *errbuf, size_t errlen);

#endif /* SEMAD_BACKENDS_H */
