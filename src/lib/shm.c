/* SPDX-License-Identifier: MIT */
/* shm.c - named shared-memory semaphores: the file in /dev/shm (create race, format
 * checks, permissions), handles, stats and listing. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm_internal.h"

#define PATH_CAP (sizeof(SHM__DIR) + sizeof(SHM__PREFIX) + SEMA_SHM_NAME_MAX + 32)

static int errno_code(int e)
{
    switch (e) {
    case ENOENT:
        return SEMA_ENOENT;
    case EACCES:
    case EPERM:
        return SEMA_EACCES;
    case ENOMEM:
    case ENOSPC:
        return SEMA_ENOMEM;
    case ENAMETOOLONG:
        return SEMA_ENAMETOOLONG;
    default:
        return SEMA_EIO;
    }
}

static int name_ok(const char *name)
{
    if (name == NULL || name[0] == '\0' || name[0] == '.')
        return SEMA_EINVAL;
    size_t n = strlen(name);
    if (n > SEMA_SHM_NAME_MAX)
        return SEMA_ENAMETOOLONG;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        if (!ok)
            return SEMA_EINVAL;
    }
    return 0;
}

static void make_path(char *buf, const char *name)
{
    snprintf(buf, PATH_CAP, "%s%s%s", SHM__DIR, SHM__PREFIX, name);
}

static void init_state(shm__state_t *st, uint64_t capacity)
{
    pthread_mutexattr_t a;
    memset(st, 0, sizeof(*st));
    st->magic = SHM__MAGIC;
    st->version = SHM__VERSION;
    st->nslots = SEMA_SHM_MAX_SLOTS;
    st->size = sizeof(*st);
    st->capacity = capacity;
    st->next_ticket = 1;
    st->pidns = sema__shm_pidns();
    atomic_init(&st->word, capacity << 1);
    SEMA__CHECK(pthread_mutexattr_init(&a) == 0);
    SEMA__CHECK(pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED) == 0);
    /* PTHREAD_MUTEX_ROBUST is an enum in glibc: never guard it with #ifdef. */
    SEMA__CHECK(pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST) == 0);
    SEMA__CHECK(pthread_mutex_init(&st->lock, &a) == 0);
    pthread_mutexattr_destroy(&a);
}

/* Liveness goes by pid, and a pid means something only inside one PID namespace: a
 * process of another namespace (a container sharing /dev/shm) would take live holders for
 * dead ones, and be taken for dead. 0 on either side: unknown, allowed. */
static int same_pidns(uint64_t creator)
{
    uint64_t mine = creator != 0 ? sema__shm_pidns() : 0;
    return creator == 0 || mine == 0 || mine == creator;
}

/* Map an existing file after checking it is a sema semaphore of our format. */
static int map_existing(int fd, shm__state_t **out)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return errno_code(errno);
    if (!S_ISREG(sb.st_mode) || sb.st_size < (off_t)(sizeof(uint64_t) * 3))
        return SEMA_ECORRUPT;
    if ((uint64_t)sb.st_size < sizeof(shm__state_t)) {
        uint64_t head[2] = {0, 0}; /* magic, version: a short file may be an older format */
        if (pread(fd, head, sizeof(head), 0) != (ssize_t)sizeof(head) || head[0] != SHM__MAGIC)
            return SEMA_ECORRUPT;
        return (uint32_t)head[1] != SHM__VERSION ? SEMA_EVERSION : SEMA_ECORRUPT;
    }
    shm__state_t *st = mmap(NULL, sizeof(*st), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (st == MAP_FAILED)
        return errno_code(errno);
    int rc = 0;
    if (st->magic != SHM__MAGIC)
        rc = SEMA_ECORRUPT;
    else if (st->version != SHM__VERSION)
        rc = SEMA_EVERSION;
    else if (st->size != sizeof(*st) || (uint64_t)sb.st_size != sizeof(*st) ||
             st->nslots != SEMA_SHM_MAX_SLOTS || st->capacity == 0 ||
             st->capacity > SHM__MAX_CAPACITY)
        rc = SEMA_ECORRUPT;
    else if (!same_pidns(st->pidns))
        rc = SEMA_EACCES;
    if (rc != 0) {
        munmap(st, sizeof(*st));
        return rc;
    }
    *out = st;
    return 0;
}

/* Build the semaphore in a private temporary file, then link it into place: a name never
 * shows a half-initialised state, and of two racing creators exactly one link wins. */
static int create_file(const char *path, uint64_t capacity, unsigned mode)
{
    static _Atomic unsigned counter;
    char tmp[PATH_CAP];
    int fd = -1;
    /* A name taken is the leftover of a dead creator whose pid we got: try the next ones. */
    for (int tries = 0; fd < 0 && tries < 64; tries++) {
        snprintf(tmp, sizeof(tmp), "%s.sema-tmp.%d.%u", SHM__DIR, (int)getpid(),
                 atomic_fetch_add(&counter, 1));
        fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0)
        return errno_code(errno);
    int rc = 0;
    shm__state_t *st = MAP_FAILED;
    if (fchmod(fd, mode) != 0 || ftruncate(fd, (off_t)sizeof(*st)) != 0)
        rc = errno_code(errno);
    if (rc == 0) {
        st = mmap(NULL, sizeof(*st), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (st == MAP_FAILED)
            rc = errno_code(errno);
    }
    if (rc == 0) {
        init_state(st, capacity);
        munmap(st, sizeof(*st));
        if (link(tmp, path) != 0)
            rc = errno == EEXIST ? SEMA_EEXIST : errno_code(errno);
    }
    unlink(tmp);
    close(fd);
    return rc;
}

static int open_state(const char *path, uint64_t capacity, int flags, unsigned mode,
                      shm__state_t **st)
{
    for (int attempt = 0; attempt < 8; attempt++) {
        int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (fd >= 0) {
            int rc = map_existing(fd, st);
            close(fd);
            return rc;
        }
        if (errno != ENOENT || (flags & SEMA_SHM_EXISTING))
            return errno_code(errno);
        int rc = create_file(path, capacity, mode);
        if (rc != 0 && rc != SEMA_EEXIST) /* EEXIST: another creator won; open theirs */
            return rc;
    }
    return SEMA_EIO; /* created and removed under us again and again */
}

int sema_shm_open(const char *name, uint64_t capacity, int flags, unsigned mode, sema_shm_t **out)
{
    char path[PATH_CAP];
    int rc = name_ok(name);
    if (rc != 0 || out == NULL)
        return rc != 0 ? rc : SEMA_EINVAL;
    if (!(flags & SEMA_SHM_EXISTING) && (capacity == 0 || capacity > SHM__MAX_CAPACITY))
        return SEMA_EINVAL;
    if ((flags & ~(SEMA_SHM_ADOPT | SEMA_SHM_EXISTING)) != 0 || (mode & ~07777u) != 0)
        return SEMA_EINVAL;
    sema_shm_t *h = sema__calloc(1, sizeof(*h));
    if (h == NULL)
        return SEMA_ENOMEM;
    make_path(path, name);
    rc = open_state(path, capacity, flags, mode ? mode : 0600, &h->st);
    if (rc == 0 && !(flags & (SEMA_SHM_ADOPT | SEMA_SHM_EXISTING)) && h->st->capacity != capacity) {
        munmap(h->st, sizeof(*h->st));
        rc = SEMA_EEXIST;
    }
    if (rc != 0) {
        sema__free(h);
        return rc;
    }
    h->pid = sema__shm_self(NULL);
    h->slot = -1;
    h->capacity = h->st->capacity;
    *out = h;
    return 0;
}

void sema_shm_close(sema_shm_t *h)
{
    if (h == NULL)
        return;
    if (h->pid == sema__shm_self(NULL) && h->slot >= 0 && sema__shm_lock(h->st) == 0) {
        sema__shm_drop_slot(h->st, h->slot);
        sema__shm_admit(h->st);
        sema__shm_unlock(h->st);
    }
    munmap(h->st, sizeof(*h->st));
    sema__free(h);
}

int sema_shm_unlink(const char *name)
{
    char path[PATH_CAP];
    int rc = name_ok(name);
    if (rc != 0)
        return rc;
    make_path(path, name);
    return unlink(path) == 0 ? 0 : errno_code(errno);
}

static int by_ticket(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Under the lock: copy the state out; waiters in ticket order. */
static void snapshot(const shm__state_t *st, sema_shm_stats_t *out)
{
    uint64_t order[SEMA_SHM_MAX_SLOTS][2];
    uint32_t nw = 0;
    memset(out, 0, sizeof(*out));
    out->capacity = st->capacity;
    out->available = sema__shm_avail(st);
    out->reclaimed = st->reclaimed;
    for (int i = 0; i < SEMA_SHM_MAX_SLOTS; i++) {
        const shm__slot_t *s = &st->slots[i];
        uint64_t held = atomic_load(&s->held);
        if (atomic_load(&s->pid) == 0)
            continue;
        if (held > 0) {
            sema_shm_entry_t *e = &out->holders[out->nholders++];
            e->pid = atomic_load(&s->pid);
            e->weight = held;
            e->since_ms = atomic_load(&s->since_ms);
            out->held += held;
        }
        if (atomic_load(&s->wstate) == SHM__WAITING) {
            order[nw][0] = s->ticket;
            order[nw++][1] = (uint64_t)i;
        }
    }
    qsort(order, nw, sizeof(order[0]), by_ticket);
    for (uint32_t k = 0; k < nw; k++) {
        const shm__slot_t *s = &st->slots[order[k][1]];
        out->waiters[k] = (sema_shm_entry_t){atomic_load(&s->pid), s->want, s->wsince_ms};
        /* Up to 128 wants of up to 2^62 each: saturate rather than wrap. */
        out->waiting = s->want > UINT64_MAX - out->waiting ? UINT64_MAX : out->waiting + s->want;
    }
    out->nwaiters = nw;
}

int sema_shm_stats(sema_shm_t *h, sema_shm_stats_t *out)
{
    if (h == NULL || out == NULL || h->pid != sema__shm_self(NULL))
        return SEMA_EINVAL;
    int rc = sema__shm_lock(h->st);
    if (rc != 0)
        return rc;
    sema__shm_reap(h->st, 1);
    sema__shm_admit(h->st);
    sema__shm_settle(h->st);
    snapshot(h->st, out);
    sema__shm_unlock(h->st);
    return 0;
}

int sema_shm_foreach(int (*fn)(const char *name, void *ud), void *ud)
{
    if (fn == NULL)
        return SEMA_EINVAL;
    DIR *d = opendir(SHM__DIR);
    if (d == NULL)
        return errno_code(errno);
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        const char *n = e->d_name;
        if (strncmp(n, SHM__PREFIX, strlen(SHM__PREFIX)) == 0 &&
            name_ok(n + strlen(SHM__PREFIX)) == 0)
            rc = fn(n + strlen(SHM__PREFIX), ud);
    }
    closedir(d);
    return rc;
}

/* --- test hooks ----------------------------------------------------------------------- */

shm__state_t *sema__shm_test_state(sema_shm_t *h)
{
    return h->st;
}

int sema__shm_test_lock(sema_shm_t *h)
{
    return sema__shm_lock(h->st);
}

int sema__shm_test_lock_scribble(sema_shm_t *h, uint64_t avail)
{
    int rc = sema__shm_lock(h->st);
    if (rc == 0)
        sema__shm_set_avail(h->st, avail);
    return rc;
}

int sema__shm_test_forge(sema_shm_t *h, int32_t pid, uint64_t start, uint64_t weight)
{
    shm__state_t *st = h->st;
    int rc = sema__shm_lock(st);
    if (rc != 0)
        return rc;
    rc = SEMA_ELIMIT;
    for (int i = 0; i < SEMA_SHM_MAX_SLOTS && rc != 0; i++) {
        shm__slot_t *s = &st->slots[i];
        if (atomic_load(&s->pid) != 0 || sema__shm_avail(st) < weight)
            continue;
        sema__shm_set_avail(st, sema__shm_avail(st) - weight);
        atomic_store(&s->start, start);
        atomic_store(&s->held, weight);
        atomic_store(&s->since_ms, sema__shm_wall_ms());
        atomic_store(&s->pid, pid);
        if (st->hiwater < (uint32_t)i + 1)
            st->hiwater = (uint32_t)i + 1;
        rc = 0;
    }
    sema__shm_unlock(st);
    return rc;
}

int sema__shm_test_fast_window(sema_shm_t *h, uint64_t weight)
{
    int rc = sema_shm_acquire(h, weight, 0); /* claims the slot */
    if (rc != 0)
        return rc;
    shm__slot_t *s = &h->st->slots[h->slot];
    atomic_store(&s->busy, 1);
    atomic_fetch_sub(&h->st->word, weight << 1); /* a second CAS whose record never follows */
    return 0;
}

int sema__shm_test_waiting(sema_shm_t *h)
{
    if (sema__shm_lock(h->st) != 0)
        return 0;
    int waiting = h->slot >= 0 && atomic_load(&h->st->slots[h->slot].wstate) == SHM__WAITING;
    sema__shm_unlock(h->st);
    return waiting;
}
