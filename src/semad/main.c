/* SPDX-License-Identifier: MIT */
/* main.c - semad: parse the configuration, open the store, run the engine and the HTTP
 * server on one libuv loop until SIGTERM/SIGINT. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <uv.h>

#include "backends/backends.h"
#include "common/log.h"
#include "engine/engine.h"
#include "http/notify.h"
#include "http/render.h"
#include "http/router.h"
#include "http/server.h"
#include "semad/config.h"
#include "store/store.h"

#include "sema/error.h"
#include "sema/version.h"

/* Parked requests hold a descriptor each: raise the soft limit to the hard one and say so
 * when the connection cap cannot be reached. */
static void raise_fd_limit(const semad_config_t *cfg)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < cfg->http.max_connections + 64)
        log_warn("open-file limit %llu is below --max-connections %llu: accepts will fail "
                 "before the cap",
                 (unsigned long long)rl.rlim_cur, (unsigned long long)cfg->http.max_connections);
}

static int run(semad_config_t *cfg)
{
    char err[512] = "";
    store_t *store = NULL;
    int on_redis = strncmp(cfg->engine.backend, "redis", 5) == 0;
    const engine_backend_t *be = backends_find(cfg->engine.backend, err, sizeof err);
    if (be == NULL) {
        fprintf(stderr, "semad: cannot start the engine: %s (EINVAL)\n", err);
        return 1;
    }
    /* On Redis the state and its durability are Redis's: strict waits for its replicas. */
    cfg->engine.redis.strict = cfg->durability == STORE_STRICT;
    if (cfg->durability != STORE_NONE && !on_redis) {
        int rc = store_open(&store, cfg->data_dir, cfg->durability, err, sizeof err);
        if (rc != 0) {
            fprintf(stderr, "semad: cannot open the store in %s: %s (%s)\n", cfg->data_dir,
                    err[0] ? err : sema_strerror(rc), sema_err_name(rc));
            return 1;
        }
    }
    cfg->engine.embedded.store = store;
    uv_loop_t *loop = uv_default_loop();
    engine_t *engine = NULL;
    cfg->engine.render_event = render_event_data; /* events in the wire format */
    int rc = engine_new(&engine, loop, be, &cfg->engine, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "semad: cannot start the engine: %s (%s)\n",
                err[0] ? err : sema_strerror(rc), sema_err_name(rc));
        store_close(store);
        return 1;
    }
    server_t *srv = NULL;
    rc = server_new(&srv, loop, engine, &cfg->http, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "semad: %s\n", err);
        engine_shutdown(engine);
        uv_run(loop, UV_RUN_DEFAULT);
        store_close(store);
        return rc == SEMA_EACCES || rc == SEMA_EINVAL ? 2 : 1; /* 2: fix the configuration */
    }
    char ready[600];
    snprintf(ready, sizeof ready, "semad %s ready (durability %s, %s %s)", SEMA_VERSION_STRING,
             cfg->durability == STORE_STRICT    ? "strict"
             : cfg->durability == STORE_RELAXED ? "relaxed"
                                                : "none",
             on_redis ? "engine" : "data",
             on_redis                        ? "redis"
             : cfg->durability == STORE_NONE ? "-"
                                             : cfg->data_dir);
    log_info("%s", ready);
    char state[640];
    snprintf(state, sizeof state, "READY=1\nSTATUS=%s", ready);
    notify_send(state); /* Type=notify units start their dependents now */
    uv_run(loop, UV_RUN_DEFAULT);
    server_free(srv);
    uv_loop_close(loop);
    store_close(store);
    log_info("stopped");
    return 0;
}

int main(int argc, char **argv)
{
    semad_config_t cfg;
    char err[256];
    config_default(&cfg);
    if (config_parse(&cfg, argc, argv, err, sizeof err) != 0) {
        fprintf(stderr, "semad: %s\n", err);
        return 2;
    }
    log_set_level(cfg.log_level);
    if (cfg.help) {
        config_usage(stdout);
        return 0;
    }
    if (cfg.version) {
        printf("semad %s\n", SEMA_VERSION_STRING);
        return 0;
    }
    if (cfg.print_routes) {
        router_print(stdout);
        return 0;
    }
    if (cfg.check_dir != NULL)
        return store_check(cfg.check_dir, stdout) == 0 ? 0 : 1;
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit(&cfg);
    return run(&cfg);
}
