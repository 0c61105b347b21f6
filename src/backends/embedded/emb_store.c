/* SPDX-License-Identifier: MIT */
/* emb_store.c - the embedded back end's write-ahead through the durable store: loading at
 * start, one group commit per loop tick, and the rollback when a commit fails. */
#include "backends/embedded/emb_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "engine/engine_limits.h"

typedef struct {
    emb_t *eb;
    int err;
    char bad_id[72]; /* the lease that could not be restored, for the message */
} load_ctx_t;

static void on_sem(void *arg, const store_sem_t *rec)
{
    load_ctx_t *c = arg;
    emb_t *eb = c->eb;
    size_t len = rec->name ? strlen(rec->name) : 0;
    emb_sem_t *s;

    if (c->err || len == 0 || len > ENGINE_NAME_MAX || emb__sem_find(eb, rec->name, len) != NULL)
        return;
    s = emb__sem_new(eb, rec->name, len, rec->capacity, rec->legacy ? EMB_SEM_LEGACY : 0);
    if (s == NULL) {
        c->err = SEMA_ENOMEM;
        return;
    }
    s->fence = rec->fence;
    s->created_at_ms = rec->created_at_ms;
    if (rec->legacy)
        s->available = rec->available;
    if (emb__lim_set(eb, s, rec->tenant_max, rec->rate_per_s, rec->rate_burst) != 0) {
        c->err = SEMA_ENOMEM;
        return;
    }
    emb__lim_loaded(eb, s);
    if (rec->fence > eb->fence_seq)
        eb->fence_seq = rec->fence;
}

static void on_lease(void *arg, const store_lease_t *rec)
{
    load_ctx_t *c = arg;
    emb_t *eb = c->eb;
    size_t len = rec->sem ? strlen(rec->sem) : 0;
    emb_sem_t *s;

    if (c->err)
        return;
    if (len == 0 || len > ENGINE_NAME_MAX || rec->id == NULL) {
        c->err = SEMA_ECORRUPT;
        snprintf(c->bad_id, sizeof(c->bad_id), "%.64s", rec->id != NULL ? rec->id : "(null)");
        return;
    }
    if (rec->is_lock) {
        s = emb__lock_find(eb, rec->sem, len);
        if (s == NULL)
            s = emb__sem_new(eb, rec->sem, len, eb->cfg.lock_readers, EMB_SEM_LOCK);
    } else {
        s = emb__sem_find(eb, rec->sem, len);
        if (s == NULL)
            return; /* a lease of a deleted semaphore: void */
    }
    if (s == NULL) {
        c->err = SEMA_ENOMEM;
        return;
    }
    int rc = emb__lease_load(eb, s, rec);
    if (rc != 0 && c->err == 0) {
        c->err = rc;
        snprintf(c->bad_id, sizeof(c->bad_id), "%.64s", rec->id);
    }
}

static void raise_fence(void *arg, enode_t *n)
{
    emb_t *eb = arg;
    emb_sem_t *s = ECONTAINER(n, emb_sem_t, node);

    if (s->fence < eb->fence_seq)
        s->fence = eb->fence_seq;
}

static void on_ticket(void *arg, const store_ticket_t *rec)
{
    load_ctx_t *c = arg;
    int rc;

    if (c->err)
        return;
    rc = emb__ticket_load(c->eb, rec);
    if (rc != 0) {
        c->err = rc;
        snprintf(c->bad_id, sizeof(c->bad_id), "%.64s", rec->id);
    }
}

int emb__store_load(emb_t *eb, char *errbuf, size_t errlen)
{
    load_ctx_t c = {eb, 0, ""};
    int rc = store_load(eb->store, on_sem, on_lease, &c, errbuf, errlen);

    /* After the leases: a granted ticket finds its lease. */
    if (rc == 0 && c.err == 0)
        rc = store_load_tickets(eb->store, on_ticket, &c, errbuf, errlen);
    uint64_t top = 0;

    /* Deleted semaphores' fences count too: no fence is ever handed out twice. */
    if (rc == 0 && c.err == 0) {
        rc = store_max_fence(eb->store, &top);
        if (rc != 0 && errbuf != NULL && errlen > 0)
            snprintf(errbuf, errlen, "cannot read the store's highest fence");
        else if (top > eb->fence_seq)
            eb->fence_seq = top;
        eb->fence_stored = top;
        /* A grant's fence is stored in the fence floor, not its semaphore's row: no
         * semaphore's fence may read lower than one it handed out (a gap is allowed). */
        etab_each(&eb->sems, raise_fence, eb);
    }

    if (rc == 0 && c.err != 0) {
        rc = c.err;
        if (errbuf != NULL && errlen > 0 && rc == SEMA_ENOMEM)
            snprintf(errbuf, errlen, "out of memory loading the store");
        else if (errbuf != NULL && errlen > 0)
            snprintf(errbuf, errlen,
                     "the store holds a lease or ticket semad cannot restore (id \"%s\"): "
                     "refusing to start rather than hand its units out twice",
                     c.bad_id);
    }
    return rc;
}

/* ---- clearing the state ---- */

static void clear_sem(void *arg, enode_t *n)
{
    emb_t *eb = ((void **)arg)[0];
    elist_t *keep = ((void **)arg)[1];
    emb_sem_t *s = ECONTAINER(n, emb_sem_t, node);

    while (!elist_empty(&s->waiters)) {
        emb_req_t *er = ECONTAINER(s->waiters.next, emb_req_t, link);
        if (er->kind == EMB_KIND_PART) /* the request leaves all its lines at once */
            er = er->multi->main;
        emb__unpark(eb, er);
        if (keep != NULL) {
            elist_push_back(keep, &er->link);
        } else {
            er->req->priv = NULL;
            sema__free(er);
        }
    }
    while (!elist_empty(&s->holders)) {
        emb_lease_t *l = ECONTAINER(s->holders.next, emb_lease_t, link);
        emb__lease_free(eb, emb__lease_main(l) != NULL ? emb__lease_main(l) : l); /* and parts */
    }
    emb__sem_free(eb, s);
}

/* Free every semaphore, lock and lease. Parked requests move to `keep` in FIFO order per
 * semaphore (their deadlines kept in hi.deadline), or are dropped when `keep` is NULL. */
void emb__state_clear(emb_t *eb, elist_t *keep)
{
    void *arg[2] = {eb, keep};

    eb->clearing = 1;
    etab_each(&eb->sems, clear_sem, arg);
    etab_each(&eb->locks, clear_sem, arg);
    eb->root = eb->lock_root = NULL;
    eb->clearing = 0;
}

/* ---- group commit ---- */

static emb_sem_t *sem_for_waiter(emb_t *eb, emb_req_t *er)
{
    engine_req_t *req = er->req;
    emb_sem_t *s;

    if (req->op != ENGINE_LOCK_ACQUIRE)
        return emb__sem_find(eb, req->name, req->name_len);
    s = emb__lock_find(eb, req->name, req->name_len);
    if (s == NULL)
        s = emb__sem_new(eb, req->name, req->name_len, eb->cfg.lock_readers, EMB_SEM_LOCK);
    return s;
}

/* Put a kept waiter back at the end of its semaphore's queue, with its old deadline. */
static int repark(emb_t *eb, emb_req_t *er, emb_sem_t *s)
{
    engine_req_t *req = er->req;

    if (er->hi.deadline != UINT64_MAX && eheap_push(&eb->heap, &er->hi) != 0)
        return SEMA_ENOMEM;
    if (er->kind == EMB_KIND_ACQUIRE && (req->op == ENGINE_LOCK_ACQUIRE))
        er->weight = req->mode == ENGINE_MODE_SHARED ? 1 : s->capacity;
    if (er->kind == EMB_KIND_ACQUIRE &&
        (er->weight > s->capacity || emb__lim_too_heavy(s, er->weight) != BE_MSG_NONE)) {
        eheap_remove(&eb->heap, &er->hi);
        return SEMA_EINVAL;
    }
    er->oseq = ++eb->gseq; /* behind the tickets the reload put back in their places */
    if ((req->tenant != NULL && emb__lim_ensure(eb, s) != 0) ||
        (s->lim != NULL && emb__tenant_join(eb, s, er) != 0)) {
        eheap_remove(&eb->heap, &er->hi);
        return SEMA_ENOMEM;
    }
    er->sem = s;
    er->state = EMB_REQ_PARKED;
    elist_push_back(&s->waiters, &er->link);
    emb__oq_insert(s, er);
    s->nwaiters++;
    s->waiting += er->weight;
    eb->nparked++;
    if (req->idem_key != NULL && req->idem_key[0] != '\0' &&
        emb__idem_find(eb, s, req->idem_key, strlen(req->idem_key)) == NULL) {
        er->idem = emb__idem_new(eb, s, req->idem_key, strlen(req->idem_key));
        if (er->idem != NULL)
            er->idem->waiter = er;
    }
    return 0;
}

/* Put a kept request on several semaphores back at the end of each line, with its old
 * deadline; SEMA_ECANCELED when one of them is gone. */
static int repark_multi(emb_t *eb, emb_req_t *er)
{
    engine_req_t *req = er->req;
    be_msg_t why = BE_MSG_NONE;
    int st;
    emb_multi_t *m = emb__multi_new(eb, er, req->parts, req->nparts, &why);

    if (m == NULL)
        return be_msg_code(why) == SEMA_ENOENT ? SEMA_ECANCELED : be_msg_code(why);
    er->oseq = 0;
    if ((st = emb__multi_park(eb, m)) != 0) {
        emb__multi_free(m);
        return st;
    }
    if (er->hi.deadline != UINT64_MAX && eheap_push(&eb->heap, &er->hi) != 0) {
        emb__unpark(eb, er);
        return SEMA_ENOMEM;
    }
    if (req->idem_key != NULL && req->idem_key[0] != '\0' &&
        emb__idem_find(eb, NULL, req->idem_key, strlen(req->idem_key)) == NULL) {
        er->idem = emb__idem_new(eb, NULL, req->idem_key, strlen(req->idem_key));
        if (er->idem != NULL)
            er->idem->waiter = er;
    }
    return 0;
}

/* A commit failed: nothing of it is in the store. Rebuild the state from the store and
 * queue the parked requests again where their semaphore still exists. */
static void restore_from_store(emb_t *eb)
{
    elist_t parked;
    int rc;

    elist_init(&parked);
    emb__tickets_clear(eb, BE_MSG_STORE_TICKET_AGAIN);
    emb__state_clear(eb, &parked);
    rc = emb__store_load(eb, eb->errbuf, sizeof(eb->errbuf));
    if (rc != 0) {
        /* A cleared or partial state could grant units the store says are held: stop, and
         * let the next start load the store or refuse it with a message. */
        fprintf(stderr,
                "semad: after a failed commit the store cannot be read back (%s): "
                "stopping (exit 74)\n",
                eb->errbuf);
        _exit(74);
    }
    engine__events_rollback(eb->front);
    while (!elist_empty(&parked)) {
        emb_req_t *er = ECONTAINER(parked.next, emb_req_t, link);
        emb_sem_t *sems[ENGINE_PARTS_MAX];
        int st;
        elist_remove(&er->link);
        if (er->req->op == ENGINE_ACQUIRE_MULTI) {
            st = repark_multi(eb, er);
            if (st != 0) {
                emb__finish(eb, er, st == SEMA_ECANCELED ? SEMA_EIO : st,
                            "the store failed and a semaphore is gone after the rollback");
                continue;
            }
            emb__admit_all(eb, sems, emb__req_sems(er, sems));
            continue;
        }
        emb_sem_t *s = sem_for_waiter(eb, er);
        st = s != NULL ? repark(eb, er, s) : SEMA_ECANCELED;
        if (st != 0) {
            emb__fail(eb, er,
                      st == SEMA_ECANCELED ? BE_MSG_STORE_SEM_GONE
                      : st == SEMA_EINVAL  ? BE_MSG_WAITER_ABOVE_CAPACITY
                                           : BE_MSG_NOMEM);
            if (s != NULL)
                emb__maybe_free_lock(eb, s);
            continue;
        }
        emb__admit(eb, s);
    }
    eb->timer_due = UINT64_MAX - 1; /* force a re-arm: the heap was rebuilt */
    emb__timer_rearm(eb);
}

static void fail_batch(emb_t *eb, elist_t *batch)
{
    for (elist_t *x = batch->next; x != batch; x = x->next) {
        emb_req_t *er = ECONTAINER(x, emb_req_t, link);
        emb__lease_disown(er); /* the grant is not in the store; the reload drops it */
        engine_result_clear(&er->req->res);
        er->req->status = be_msg_code(BE_MSG_STORE_ROLLED_BACK);
        er->req->created = 0;
        er->req->message = be_msg_text(BE_MSG_STORE_ROLLED_BACK);
    }
}

/* ---- the committer thread ----
 *
 * A group commit is written and synced on a thread of its own, so the loop goes on serving
 * (and recording the next transaction) during the sync. One commit runs at a time; the
 * replies whose mutations it carries (commit_fly) go out when it has finished, and those
 * recorded meanwhile (commit_wait) ride the next one, so a reply never goes out before
 * every commit started before it. */
#define GATHER_MAX_NS 1000000u /* the longest the next commit waits for more requests */
#define INLINE_MAX_NS 2000000u /* a commit runs on the loop while the last took less */

struct emb_committer {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* work posted, stop asked, a wake-up asked, or a commit done */
    int work, done, stop;
    int stopped; /* joined (loop thread only): commits run inline from then on */
    int rc;
    int gather;       /* the posted commit carries replies: tick after it (see gather()) */
    int tick;         /* the gathering deadline passed: the loop starts the next commit */
    uint64_t wake_at; /* uv_hrtime() at which to tick, or 0 */
    uint64_t run_ns;  /* how long the last commit took to write and sync */
    char err[256];
    int efd;        /* eventfd: the committer's signal to the loop (done, or a tick) */
    uv_poll_t poll; /* the loop's watch on efd */
    int tfd;        /* timerfd: the end of a gathering after a commit on the loop */
    uv_poll_t tpoll;
};

/* Wake the loop. An eventfd rather than a uv_async_t: libuv's loop spins (sched_yield)
 * while an async sender is between its two steps, which a preempted committer made
 * frequent on a busy machine; what the signal means is read under c->mu anyway. */
static void notify(emb_committer_t *c)
{
    uint64_t one = 1;
    ssize_t n;

    do
        n = write(c->efd, &one, sizeof one);
    while (n < 0 && errno == EINTR);
}

/* Wait for work; meanwhile tick at wake_at, if set. Called with c->mu. */
static void wait_work(emb_committer_t *c)
{
    while (!c->work && !c->stop) {
        uint64_t now = uv_hrtime();
        if (c->wake_at == 0) {
            pthread_cond_wait(&c->cv, &c->mu);
        } else if (now >= c->wake_at) {
            c->wake_at = 0;
            c->tick = 1;
            notify(c);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            uint64_t ns = (uint64_t)ts.tv_nsec + (c->wake_at - now);
            ts.tv_sec += (time_t)(ns / 1000000000u);
            ts.tv_nsec = (long)(ns % 1000000000u);
            pthread_cond_timedwait(&c->cv, &c->mu, &ts);
        }
    }
}

static void *committer_main(void *arg)
{
    emb_t *eb = arg;
    emb_committer_t *c = eb->committer;

    pthread_mutex_lock(&c->mu);
    for (;;) {
        wait_work(c);
        if (!c->work)
            break;
        c->wake_at = 0;
        pthread_mutex_unlock(&c->mu);
        uint64_t t0 = uv_hrtime();
        int rc = store_commit_run(eb->store, c->err, sizeof(c->err));
        uint64_t t1 = uv_hrtime();
        pthread_mutex_lock(&c->mu);
        c->run_ns = t1 - t0;
        /* The loop may wait this long for the clients just answered (gather()); tick then,
         * unless the next commit is posted first. Armed here, so the loop never has to
         * wake this thread just to time its wait. */
        c->wake_at = c->gather ? t1 + (c->run_ns < GATHER_MAX_NS ? c->run_ns : GATHER_MAX_NS) : 0;
        c->rc = rc;
        c->work = 0;
        c->done = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        notify(c);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static void commit_done(emb_t *eb, int rc);
static void start_commit(emb_t *eb, int force);

/* Take what the committer finished, if it has: 1 and its result in *rc. */
static int take_done(emb_committer_t *c, emb_t *eb, int wait, int *rc)
{
    int done;

    pthread_mutex_lock(&c->mu);
    while (wait && !c->done)
        pthread_cond_wait(&c->cv, &c->mu);
    done = c->done;
    c->done = 0;
    *rc = c->rc;
    eb->last_run_ns = c->run_ns;
    if (done && c->rc != 0)
        snprintf(eb->errbuf, sizeof(eb->errbuf), "%s", c->err);
    pthread_mutex_unlock(&c->mu);
    return done;
}

/* Take the committer's tick (the gathering deadline passed), if it sent one. */
static int take_tick(emb_committer_t *c)
{
    int tick;

    pthread_mutex_lock(&c->mu);
    tick = c->tick;
    c->tick = 0;
    pthread_mutex_unlock(&c->mu);
    return tick;
}

static void on_commit_signal(uv_poll_t *h, int status, int events)
{
    emb_t *eb = h->data;
    uint64_t n;
    int rc;

    (void)status;
    (void)events;
    while (read(eb->committer->efd, &n, sizeof n) < 0 && errno == EINTR)
        ;
    if (eb->committer->stopped)
        return;
    if (take_done(eb->committer, eb, 0, &rc))
        commit_done(eb, rc);
    /* One signal may stand for both (the eventfd adds them up): take the tick too. */
    if (take_tick(eb->committer) && eb->gather_until != 0)
        start_commit(eb, 1);
}

/* The gathering after a commit on the loop ran out: start the next commit. */
static void on_gather_timer(uv_poll_t *h, int status, int events)
{
    emb_t *eb = h->data;
    uint64_t n;

    (void)status;
    (void)events;
    while (read(eb->committer->tfd, &n, sizeof n) < 0 && errno == EINTR)
        ;
    if (!eb->committer->stopped && !eb->committing && eb->gather_until != 0)
        start_commit(eb, 1);
}

int emb__committer_start(emb_t *eb)
{
    emb_committer_t *c = sema__calloc(1, sizeof(*c));

    if (c == NULL)
        return SEMA_ENOMEM;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        sema__free(c);
        return SEMA_ENOMEM;
    }
    pthread_condattr_t ca;
    int bad = pthread_condattr_init(&ca) != 0;
    if (!bad) {
        bad = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
              pthread_cond_init(&c->cv, &ca) != 0;
        pthread_condattr_destroy(&ca);
    }
    if (bad) {
        pthread_mutex_destroy(&c->mu);
        sema__free(c);
        return SEMA_ENOMEM;
    }
    c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->efd < 0 || uv_poll_init(eb->loop, &c->poll, c->efd) != 0) {
        if (c->efd >= 0)
            close(c->efd);
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        sema__free(c);
        return SEMA_ENOMEM;
    }
    c->poll.data = eb;
    (void)uv_poll_start(&c->poll, UV_READABLE, on_commit_signal);
    /* Without it (no timerfd), commits on the loop just do not gather. */
    c->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (c->tfd >= 0 && uv_poll_init(eb->loop, &c->tpoll, c->tfd) != 0) {
        close(c->tfd);
        c->tfd = -1;
    }
    if (c->tfd >= 0) {
        c->tpoll.data = eb;
        (void)uv_poll_start(&c->tpoll, UV_READABLE, on_gather_timer);
    }
    eb->committer = c;
    if (pthread_create(&c->thread, NULL, committer_main, eb) != 0) {
        c->stopped = 1; /* commits run on the loop thread; the handle still needs closing */
        return SEMA_ENOMEM;
    }
    return 0;
}

/* Deliver the completions in `list` (their mutations are durable, or carry none). */
static void deliver(emb_t *eb, elist_t *list)
{
    for (elist_t *x = list->next; x != list; x = x->next)
        ECONTAINER(x, emb_req_t, link)->state = EMB_REQ_READY;
    elist_splice(&eb->ready, list);
}

/* Start the next group commit, unless one runs (its end starts the next) or, unless
 * `force`, the loop is gathering the requests of the clients the last commit answered. */
static void start_commit(emb_t *eb, int force)
{
    emb_committer_t *c = eb->committer;

    if (eb->committing)
        return;
    if (!force && eb->gather_until != 0 && eb->nwait < eb->gather_want &&
        uv_hrtime() < eb->gather_until)
        return; /* a later request, or the committer's tick, starts it */
    eb->gather_until = 0;
    emb__store_sems_flush(eb);
    if (!store_commit_start(eb->store)) {
        /* Nothing recorded: these replies carry no mutation of their own, and every
         * commit started before them is done. */
        deliver(eb, &eb->commit_wait);
        eb->nwait = 0;
        emb__drain(eb);
        return;
    }
    elist_splice(&eb->commit_fly, &eb->commit_wait);
    eb->nfly = eb->nwait;
    eb->nwait = 0;
    eb->committing = 1;
    eb->commits++;
    /* A quick commit (a journal append and its sync) runs here: handing it to the thread
     * and back costs more than the loop could do meanwhile, since the clients it answers
     * wait for it. A slow one (a checkpoint, a slow disk) runs on the thread. */
    eb->commit_inline = c == NULL || c->stopped ||
                        (!store_commit_slow(eb->store) && eb->last_run_ns < INLINE_MAX_NS);
    if (eb->commit_inline) {
        uint64_t t0 = uv_hrtime();
        int rc = store_commit_run(eb->store, eb->errbuf, sizeof(eb->errbuf));
        eb->last_run_ns = uv_hrtime() - t0;
        commit_done(eb, rc);
        return;
    }
    pthread_mutex_lock(&c->mu);
    c->work = 1;
    c->gather = eb->nfly != 0;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* A commit just answered its requests. Under a closed-loop load most of those clients send
 * their next request within a round trip, while the requests recorded during the sync are
 * already waiting; starting the next commit at once would carry only the latter and make
 * the others wait for a whole sync more, splitting the clients into two groups that take
 * turns. So the next commit waits until as many requests wait as the last one answered plus
 * those recorded during its sync, or for as long as that sync took (at most GATHER_MAX_NS),
 * whichever comes first: the clients come back to one commit, and a commit carries twice as
 * many. A lone client (one request per commit) never waits. */
static void gather(emb_t *eb, uint64_t want)
{
    uint64_t ns = eb->last_run_ns < GATHER_MAX_NS ? eb->last_run_ns : GATHER_MAX_NS;

    eb->gather_until = 0;
    if (eb->nfly == 0 || eb->nwait >= want)
        return;
    eb->gather_want = want;
    eb->gather_until = uv_hrtime() + ns; /* the committer ticks at about the same time */
    if (eb->commit_inline) {             /* no committer to tick: the timer does */
        struct itimerspec its = {{0, 0}, {0, (long)(ns > 0 ? ns : 1)}};
        if (eb->committer->tfd < 0 || timerfd_settime(eb->committer->tfd, 0, &its, NULL) != 0)
            eb->gather_until = 0; /* nothing would end the wait: do not wait */
    }
}

#define IDLE_CHECKPOINT_MS 1000u /* commits paused this long: checkpoint what the journal has */

/* The store's checkpoint counts, for /metrics (read while no commit runs); a new failure is
 * logged (the journal keeps every change meanwhile). */
static void take_checkpoint_stats(emb_t *eb)
{
    uint64_t failures = eb->checkpoint_failures;

    store_checkpoint_stats(eb->store, &eb->checkpoints, &eb->checkpoint_failures);
    if (eb->checkpoint_failures > failures)
        log_warn("store: a checkpoint failed: %s (the journal keeps every change; tried again "
                 "within a second)",
                 store_checkpoint_error(eb->store));
}

/* Commits paused: write what the journal holds to the database, so that it (and a backup
 * taken of it) is at most this far behind. Under load the commits checkpoint themselves. */
static void on_idle_checkpoint(uv_timer_t *h)
{
    emb_t *eb = h->data;

    if (eb->committing || eb->shutting_down) {
        uv_timer_start(h, on_idle_checkpoint, IDLE_CHECKPOINT_MS, 0);
        return;
    }
    if (store_checkpoint(eb->store, NULL, 0) != 0)
        uv_timer_start(h, on_idle_checkpoint, IDLE_CHECKPOINT_MS, 0); /* the journal keeps it */
    take_checkpoint_stats(eb);
}

/* The running commit ended with rc: send its replies, or fail them and roll back. */
static void commit_done(emb_t *eb, int rc)
{
    elist_t batch;
    /* Counted before the replies go out: a client may send its next request at once. */
    uint64_t want = eb->nfly + eb->nwait;

    eb->committing = 0;
    engine__hist_observe(&eb->commit_s, (double)eb->last_run_ns / 1e9);
    store_commit_finish(eb->store, rc);
    take_checkpoint_stats(eb);
    if (store_checkpoint_pending(eb->store) && !eb->shutting_down)
        uv_timer_start(&eb->ck_timer, on_idle_checkpoint, IDLE_CHECKPOINT_MS, 0);
    elist_init(&batch);
    elist_splice(&batch, &eb->commit_fly);
    if (rc != 0) {
        eb->commit_failures++;
        /* What was recorded since was applied in memory on top of the failed commit: it
         * goes too, and the state is rebuilt from the store. */
        elist_splice(&batch, &eb->commit_wait);
        eb->nwait = 0;
        fail_batch(eb, &batch);
        store_discard_pending(eb->store);
        restore_from_store(eb);
    }
    deliver(eb, &batch);
    emb__drain(eb);
    if (eb->committer == NULL || eb->committer->stopped) {
        if (eb->ndirty != 0 || store_pending(eb->store) || !elist_empty(&eb->commit_wait))
            emb__mark_dirty(eb); /* next tick, no recursion */
    } else if (!eb->commit_inline) {
        gather(eb, want);
        if (eb->ndirty != 0 || store_pending(eb->store) || !elist_empty(&eb->commit_wait))
            start_commit(eb, 0);
    } else {
        gather(eb, want);
        if (eb->ndirty != 0 || store_pending(eb->store) || !elist_empty(&eb->commit_wait))
            emb__mark_dirty(eb); /* next tick, no recursion */
    }
}

/* Runs once per loop tick while mutations or durable replies wait. */
void emb__commit_cb(uv_check_t *h)
{
    emb_t *eb = h->data;

    eb->commit_armed = 0;
    uv_check_stop(&eb->check);
    uv_idle_stop(&eb->idle);
    start_commit(eb, 0);
}

void emb__commit_flush(emb_t *eb, uv_close_cb on_closed)
{
    emb_committer_t *c = eb->committer;
    int rc;

    eb->commit_armed = 0;
    for (;;) {
        if (!eb->committing) {
            if (eb->ndirty == 0 && !store_pending(eb->store) && elist_empty(&eb->commit_wait))
                break;
            start_commit(eb, 1);
            continue;
        }
        if (take_done(c, eb, 1, &rc)) /* committing with no thread ends inline */
            commit_done(eb, rc);
    }
    if (c == NULL)
        return;
    if (!c->stopped) {
        pthread_mutex_lock(&c->mu);
        c->stop = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->thread, NULL);
        c->stopped = 1;
    }
    uv_close((uv_handle_t *)&c->poll, on_closed); /* the engine frees c with itself */
    if (c->tfd >= 0)
        uv_close((uv_handle_t *)&c->tpoll, on_closed);
}

void emb__committer_free(emb_t *eb)
{
    emb_committer_t *c = eb->committer;

    if (c == NULL)
        return;
    close(c->efd); /* its poll handles are closed */
    if (c->tfd >= 0)
        close(c->tfd);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    sema__free(c);
    eb->committer = NULL;
}

int emb__committer_handles(const emb_t *eb)
{
    return eb->committer->tfd >= 0 ? 2 : 1;
}
