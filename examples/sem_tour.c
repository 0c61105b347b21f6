/* SPDX-License-Identifier: MIT */
/* sem_tour.c - a short tour of the in-process weighted semaphore (sema/sem.h).
 *
 * Build against an installed libsema:
 *     cc examples/sem_tour.c $(pkg-config --cflags --libs sema) -o sem_tour
 * or against the build tree:
 *     cc -Iinclude examples/sem_tour.c build/lib/libsema.a -lpthread -o sem_tour */
#include <pthread.h>
#include <stdio.h>

#include <sema/sema.h>

/* Work that needs `weight` units of the shared budget. */
static int query(void *arg)
{
    printf("query %s runs\n", (const char *)arg);
    return 0;
}

/* Called once when a queued callback request settles, in the thread that settled it. */
static void on_grant(sema_sem_waiter_t *w, int status, void *arg)
{
    sema_sem_t *db = arg;

    (void)w;
    printf("callback: %s\n", sema_err_name(status)); /* OK: it now holds 2 units */
    if (status == 0)
        sema_sem_release(db, 2);
}

int main(void)
{
    sema_sem_t *db;
    sema_sem_stats_t st;
    int rc, res;

    /* A budget of 10 units: cheap queries take 1, expensive ones 4. */
    if ((rc = sema_sem_new(&db, 10)) != 0) {
        fprintf(stderr, "sema_sem_new: %s\n", sema_strerror(rc));
        return 1;
    }

    /* 1. Plain acquire/release, waiting at most 500 ms. */
    rc = sema_sem_acquire(db, 4, 500);
    if (rc == 0) {
        query("expensive");
        sema_sem_release(db, 4);
    }

    /* 2. A try never waits and never jumps the queue. */
    if (sema_sem_try_acquire(db, 1) == 0)
        sema_sem_release(db, 1);

    /* 3. Run a function under 2 units (released even if it fails). */
    rc = sema_sem_with(db, 2, -1, query, "under-with", &res);

    /* 4. A permit that is released when the block ends. */
    {
        SEMA_PERMIT_SCOPED(p);

        if (sema_sem_acquire_permit(db, 3, -1, &p) == 0)
            query("scoped");
    } /* p released here */

    /* 5. Cancel a wait from another thread with a token. */
    {
        sema_cancel_t *stop;

        sema_cancel_new(&stop);
        sema_cancel_fire(stop); /* e.g. from a shutdown handler */
        rc = sema_sem_acquire_until(db, 1, SEMA_DEADLINE_NONE, stop);
        printf("acquire with a fired token: %s\n", sema_err_name(rc)); /* ECANCELED */
        sema_cancel_free(stop);
    }

    /* 6. For event loops: queue a request, get called back when it is granted. */
    {
        sema_sem_waiter_t w; /* must stay valid until the callback ran or it is withdrawn */

        sema_sem_acquire(db, 10, -1);
        if (sema_sem_acquire_async(db, 2, &w, on_grant, db) == SEMA_SEM_QUEUED)
            sema_sem_release(db, 10); /* grants the 2: on_grant runs in here */
    }

    /* 7. Wait until every holder is done (`wait()` of the TypeScript weighted semaphore). */
    sema_sem_wait_idle(db, -1);

    sema_sem_stats(db, &st);
    printf("capacity %llu available %lld held %llu waiters %llu\n", (unsigned long long)st.capacity,
           (long long)st.available, (unsigned long long)st.held, (unsigned long long)st.waiters);
    sema_sem_free(db);
    return 0;
}
