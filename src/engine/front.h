/* SPDX-License-Identifier: MIT */
/* front.h - the engine front's own state, shared by front.c, events.c and metrics.c. */
#ifndef SEMAD_FRONT_H
#define SEMAD_FRONT_H

#include "engine/backend.h"

/* Event text rendered once and shared by the delivery queue and the resume ring. */
typedef struct etext {
    uint32_t refs;
    size_t len;
    char data[]; /* NUL-terminated */
} etext_t;

/* Subscribers of one semaphore name. When the last one leaves, the group stays (idle) for
 * events_retain_ms, still recording events, so a subscriber that reconnects with
 * Last-Event-ID gets what it missed. */
typedef struct esub_group {
    enode_t node; /* in e->subgroups while its semaphore exists, keyed by name */
    elist_t subs;
    elist_t idle_link;   /* in e->idle_groups while idle */
    uint64_t idle_since; /* uv_now() when it went idle */
    int idle;            /* in e->idle_groups: no subscriber and no queued event */
    int attached;        /* in e->subgroups */
    uint64_t uid;        /* names the group in event ids: "<uid>-<seq>" */
    uint64_t seq;        /* the last event's number */
    uint32_t refs;       /* subs + queued events */
    size_t name_len;
    char name[];
} esub_group_t;

struct engine_sub {
    elist_t link;
    esub_group_t *grp;
    engine_event_cb cb;
    void *arg;
    uint64_t uid;  /* the run of events it follows (0: the first event's) */
    uint64_t seen; /* the last event number this subscriber got (replayed ones included) */
    int finished;
};

/* A queued event. */
typedef struct {
    elist_t link;
    esub_group_t *grp;
    uint64_t uid, seq;
    int force; /* a back end's "reset": sent to every subscriber, whatever it has seen */
    const char *type;
    etext_t *text;
} eevent_t;

/* The most recent events, for replay: a ring of ENGINE_EVENTS_RECENT. */
typedef struct {
    uint64_t uid, seq;
    const char *type;
    etext_t *text;
} erecent_t;

struct engine {
    uv_loop_t *loop;
    engine_config_t cfg;
    const engine_backend_t *ops;
    void *be;
    engine_counters_t m;
    int shutting_down;
    int flushing; /* engine__flush runs */
    int ready;    /* the store has answered (engine_when_ready) */
    void (*ready_cb)(void *arg);
    void *ready_arg;
    char name_too_long[64]; /* the detail of a name over cfg.max_name_len, with the number */
    char bad_ttl[96];       /* ... of a ttl_ms above cfg.max_ttl_ms, with the maximum */
    char bad_keepalive[96]; /* ... of a keepalive_ms above cfg.max_ticket_keepalive_ms */
    uint8_t rnd[512];
    size_t rnd_pos;
    /* events (events.c) */
    etab_t subgroups;
    elist_t events;      /* eevent_t to deliver */
    elist_t idle_groups; /* esub_group_t with no subscriber, oldest first */
    size_t nidle_groups;
    uint64_t nsubs;
    uint64_t group_uid; /* the last group's uid (random start: ids differ across runs) */
    erecent_t *recent;  /* ring of recent events (allocated at the first one) */
    size_t recent_head, recent_len;
};

/* events.c */
int engine__events_init(engine_t *e);
void engine__events_free(engine_t *e);
/* An ENGINE_EVENTS_OPEN request's inputs as the back end reads them (its id parsed): 0. */
int engine__events_open(engine_t *e, engine_req_t *req);

#endif /* SEMAD_FRONT_H */
