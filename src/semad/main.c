/* SPDX-License-Identifier: MIT */
/* main.c - semad: parse the configuration, listen, open the store, run the engine and the
 * HTTP server on one libuv loop until SIGTERM/SIGINT. */
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

/* Undo a start that failed after the server listened: close it on the loop, then free. */
static int abandon(server_t *srv, uv_loop_t *loop, engine_t *engine, store_t *store)
{
    server_stop(srv);
    if (engine != NULL)
        engine_shutdown(engine);
    uv_run(loop, UV_RUN_DEFAULT);
    server_free(srv);
    store_close(store);
    return 1;
}

/* The store of the embedded engine (durability strict or relaxed), or NULL. */
static int open_store(semad_config_t *cfg, int on_redis, store_t **store)
{
    char err[512] = "";
    *store = NULL;
    if (cfg->durability == STORE_NONE || on_redis)
        return 0;
    int rc = store_open(store, cfg->data_dir, cfg->durability, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "semad: cannot open the store in %s: %s (%s)\n", cfg->data_dir,
                err[0] ? err : sema_strerror(rc), sema_err_name(rc));
    return rc;
}

/* What the start and ready lines say of the store: "data DIR", "data -" or the engine's. */
static void store_words(const semad_config_t *cfg, engine_t *engine, char *buf, size_t cap)
{
    if (strncmp(cfg->engine.backend, "redis", 5) != 0) {
        snprintf(buf, cap, "data %s", cfg->durability == STORE_NONE ? "-" : cfg->data_dir);
        return;
    }
    memcpy(buf, "engine ", 8);
    engine_describe(engine, buf + 7, cap - 7);
}

static const char *durability_name(const semad_config_t *cfg)
{
    return cfg->durability == STORE_STRICT    ? "strict"
           : cfg->durability == STORE_RELAXED ? "relaxed"
                                              : "none";
}

typedef struct {
    const semad_config_t *cfg;
    engine_t *engine;
} ready_ctx_t;

/* Its store answered: "ready" in the log and to systemd (engine_when_ready). */
static void say_ready(void *arg)
{
    const ready_ctx_t *rc = arg;
    char where[400], ready[600];
    store_words(rc->cfg, rc->engine, where, sizeof where);
    snprintf(ready, sizeof ready, "semad %s ready (durability %s, %s)", SEMA_VERSION_STRING,
             durability_name(rc->cfg), where);
    log_info("%s", ready);
    char state[640];
    snprintf(state, sizeof state, "READY=1\nSTATUS=%s", ready);
    notify_send(state); /* Type=notify units start their dependents now */
}

/* A store that answers later (Redis): say where it is, and that semad waits for it. */
static void say_starting(const semad_config_t *cfg, engine_t *engine)
{
    char where[400], line[600];
    store_words(cfg, engine, where, sizeof where);
    snprintf(line, sizeof line, "semad %s starting (durability %s, %s): not ready until it answers",
             SEMA_VERSION_STRING, durability_name(cfg), where);
    log_info("%s", line);
    char state[640];
    snprintf(state, sizeof state, "STATUS=%s", line);
    notify_send(state);
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
    uv_loop_t *loop = uv_default_loop();
    /* Listen first: a semad that cannot have its port leaves no data store behind. */
    server_t *srv = NULL;
    int rc = server_new(&srv, loop, NULL, &cfg->http, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "semad: %s\n", err);
        uv_run(loop, UV_RUN_DEFAULT);
        return rc == SEMA_EACCES || rc == SEMA_EINVAL ? 2 : 1; /* 2: fix the configuration */
    }
    if (open_store(cfg, on_redis, &store) != 0)
        return abandon(srv, loop, NULL, NULL);
    cfg->engine.embedded.store = store;
    engine_t *engine = NULL;
    cfg->engine.render_event = render_event_data; /* events in the wire format */
    rc = engine_new(&engine, loop, be, &cfg->engine, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "semad: cannot start the engine: %s (%s)\n",
                err[0] ? err : sema_strerror(rc), sema_err_name(rc));
        return abandon(srv, loop, NULL, store);
    }
    server_set_engine(srv, engine);
    ready_ctx_t ready = {cfg, engine};
    if (on_redis)
        say_starting(cfg, engine);
    engine_when_ready(engine, say_ready, &ready);
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
