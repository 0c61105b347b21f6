/* SPDX-License-Identifier: MIT */
/* config.h - semad's settings: command-line flags, each also a SEMA_* environment variable. */
#ifndef SEMAD_CONFIG_H
#define SEMAD_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "common/log.h"
#include "engine/engine.h"
#include "http/server.h"
#include "store/store.h"

typedef struct {
    server_config_t http;          /* the HTTP layer's settings */
    engine_config_t engine;        /* caps and defaults handed to the engine */
    const char *data_dir;          /* store directory */
    store_durability_t durability; /* strict, relaxed or none */
    log_level_t log_level;         /* lines below it are not logged */
    const char *check_dir;         /* --check DIR: verify a store and exit */
    int print_routes;              /* --routes: print the route table and exit */
    int help, version;
} semad_config_t;

/* Fill `cfg` with the defaults (those `semad --help` shows). */
void config_default(semad_config_t *cfg);

/* Apply SEMA_* environment variables, then the flags in argv (flags win), and check that
 * they go together (--tls-cert with --tls-key). Strings point into argv/environ. Returns 0,
 * or SEMA_EINVAL with a message naming the flag in errbuf. */
int config_parse(semad_config_t *cfg, int argc, char **argv, char *errbuf, size_t errlen);

/* Print the usage text with every flag, its variable and default to `out`. */
void config_usage(FILE *out);

#endif /* SEMAD_CONFIG_H */
