/* SPDX-License-Identifier: MIT */
/* test_scenario_model.c - the shared scenario suite against a tiny single-threaded model of
 * docs/semantics.md, to keep the data file and its runner honest. It models several
 * semaphores (requests on all of them at once) and tenants taking turns, the round robin
 * simulated one visit at a time; it has no clock, so the scenarios of rates are not its. */
#include "scenario.h"
#include "test.h"

enum { IDLE, QUEUED, HOLDING, SETTLED };
enum { NSEM = 8, NTEN = 16, TIMED = 0x100 };
#define NEVER UINT64_MAX

typedef struct {
    char name[32];
    int64_t capacity, available;
    uint64_t tenant_max;
    int ring[NTEN], nring; /* tenants with waiters here, in turn order */
    int64_t deficit[NTEN];
    int last, in_turn; /* the tenant served last by its turn (-1: none) */
} msem_t;

typedef struct {
    msem_t s[NSEM];
    int nsem;
    int closed;
    char tenant[NTEN][32]; /* 0: the requests naming none */
    int ntenant;
    struct {
        int state, kind, result, tenant, nparts;
        int sem[SCEN_MAX_PARTS];
        uint64_t weight[SCEN_MAX_PARTS];
        uint64_t seq; /* arrival order */
    } l[SCEN_MAX_LABELS];
    uint64_t seq;
} model_t;

static model_t m;

/* ---- lines and tenants ---- */

static int part_on(int label, int s)
{
    for (int i = 0; i < m.l[label].nparts; i++)
        if (m.l[label].sem[i] == s)
            return i;
    return -1;
}

/* The first waiter on s of tenant t (-1: any), and of any kind when t < 0. */
static int first_of(int s, int t)
{
    int best = -1;
    for (int i = 0; i < SCEN_MAX_LABELS; i++)
        if (m.l[i].state == QUEUED && part_on(i, s) >= 0 &&
            (t < 0 || (m.l[i].tenant == t && (m.l[i].kind & 0xff) != SCEN_WAIT_IDLE)) &&
            (best < 0 || m.l[i].seq < m.l[best].seq))
            best = i;
    return best;
}

static uint64_t first_idle(int s)
{
    uint64_t seq = NEVER;
    for (int i = 0; i < SCEN_MAX_LABELS; i++)
        if (m.l[i].state == QUEUED && (m.l[i].kind & 0xff) == SCEN_WAIT_IDLE &&
            part_on(i, s) >= 0 && m.l[i].seq < seq)
            seq = m.l[i].seq;
    return seq;
}

static int64_t held_by(int s, int t)
{
    int64_t h = 0;
    for (int i = 0; i < SCEN_MAX_LABELS; i++) {
        int p = part_on(i, s);
        if (m.l[i].state == HOLDING && p >= 0 && (t < 0 || m.l[i].tenant == t))
            h += (int64_t)m.l[i].weight[p];
    }
    return h;
}

static int tenant_id(const char *name)
{
    if (name == NULL)
        return 0;
    for (int i = 1; i < m.ntenant; i++)
        if (strcmp(m.tenant[i], name) == 0)
            return i;
    snprintf(m.tenant[m.ntenant], sizeof m.tenant[0], "%s", name);
    return m.ntenant++;
}

/* Tenants whose lines emptied leave the ring (the one served last: the next visit goes to
 * the tenant after it); tenants that wait join it, visited at the end of the round. */
static void sync_ring(int s)
{
    msem_t *x = &m.s[s];
    for (int k = 0; k < x->nring;) {
        int t = x->ring[k];
        if (first_of(s, t) >= 0) {
            k++;
            continue;
        }
        x->deficit[t] = 0;
        if (x->last == t) {
            x->last = x->nring > 1 ? x->ring[(k + x->nring - 1) % x->nring] : -1;
            x->in_turn = 0;
        }
        memmove(&x->ring[k], &x->ring[k + 1], (size_t)(x->nring - k - 1) * sizeof(int));
        x->nring--;
    }
    for (int t = 0; t < m.ntenant; t++) {
        int in = 0;
        for (int k = 0; k < x->nring; k++)
            in |= x->ring[k] == t;
        if (in || first_of(s, t) < 0)
            continue;
        int at = x->nring;
        for (int k = 0; k < x->nring && x->last >= 0; k++)
            if (x->ring[k] == x->last)
                at = k; /* just before the last served: the end of the round */
        memmove(&x->ring[at + 1], &x->ring[at], (size_t)(x->nring - at) * sizeof(int));
        x->ring[at] = t;
        x->nring++;
    }
}

/* ---- who is next ---- */

static int ready(int label)
{
    for (int i = 0; i < m.l[label].nparts; i++) {
        int s = m.l[label].sem[i];
        if (first_of(s, m.l[label].tenant) != label || m.l[label].seq > first_idle(s))
            return 0;
    }
    return 1;
}

static int eligible(int s, int t)
{
    int h = first_of(s, t);
    if (h < 0 || m.l[h].seq > first_idle(s) || !ready(h))
        return 0;
    return m.s[s].tenant_max == 0 ||
           held_by(s, t) + (int64_t)m.l[h].weight[part_on(h, s)] <= (int64_t)m.s[s].tenant_max;
}

/* The round robin's choice on s, visiting one tenant at a time (each visit: one unit of
 * deficit), its deficits after the visits in *after. -1: nobody eligible. */
static int choice(int s, int64_t *after)
{
    msem_t *x = &m.s[s];
    int k0 = 0, any = 0;

    memcpy(after, x->deficit, sizeof x->deficit);
    for (int k = 0; k < x->nring; k++) {
        any |= eligible(s, x->ring[k]);
        if (x->ring[k] == x->last)
            k0 = k + 1;
    }
    if (!any)
        return -1;
    if (x->last >= 0 && x->in_turn && eligible(s, x->last)) {
        int h = first_of(s, x->last);
        if (after[x->last] >= (int64_t)m.l[h].weight[part_on(h, s)])
            return h;
    }
    for (int v = 0;; v++) {
        int t = x->ring[(k0 + v) % x->nring];
        if (!eligible(s, t))
            continue;
        int h = first_of(s, t);
        if (++after[t] >= (int64_t)m.l[h].weight[part_on(h, s)])
            return h;
    }
}

static int designate(int s, int64_t *after)
{
    int h = first_of(s, -1);
    if (h >= 0 && (m.l[h].kind & 0xff) == SCEN_WAIT_IDLE)
        return h;
    sync_ring(s);
    return choice(s, after);
}

static void grant(int label)
{
    for (int i = 0; i < m.l[label].nparts; i++) {
        int s = m.l[label].sem[i];
        int64_t after[NTEN];
        (void)designate(s, after);
        memcpy(m.s[s].deficit, after, sizeof after);
        m.s[s].deficit[m.l[label].tenant] -= (int64_t)m.l[label].weight[i];
        m.s[s].last = m.l[label].tenant;
        m.s[s].in_turn = 1;
        m.s[s].available -= (int64_t)m.l[label].weight[i];
    }
    m.l[label].state = HOLDING;
    m.l[label].result = 0;
    for (int i = 0; i < m.l[label].nparts; i++)
        sync_ring(m.l[label].sem[i]);
}

/* Grant whoever is next on a semaphore and fits on all of its own, until nobody is. */
static void admit(void)
{
    for (int progress = 1; progress;) {
        progress = 0;
        for (int s = 0; s < m.nsem; s++) {
            int64_t after[NTEN];
            int h = designate(s, after), ok = h >= 0;
            if (h >= 0 && (m.l[h].kind & 0xff) == SCEN_WAIT_IDLE) {
                if (held_by(s, -1) != 0)
                    continue;
                m.l[h].state = SETTLED;
                m.l[h].result = 0;
                progress = 1;
                continue;
            }
            for (int i = 0; ok && i < m.l[h].nparts; i++) {
                int t = m.l[h].sem[i];
                ok = designate(t, after) == h && (int64_t)m.l[h].weight[i] <= m.s[t].available;
            }
            if (ok) {
                grant(h);
                progress = 1;
            }
        }
    }
}

/* ---- the host ---- */

static int create(void *ctx, uint64_t cap)
{
    (void)ctx;
    memset(&m, 0, sizeof(m));
    m.nsem = 1;
    m.ntenant = 1;
    m.s[0].capacity = m.s[0].available = (int64_t)cap;
    m.s[0].last = -1;
    return 0;
}

static void destroy(void *ctx)
{
    (void)ctx;
}

static int sem_index(const char *name)
{
    if (name == NULL)
        return 0;
    for (int i = 1; i < m.nsem; i++)
        if (strcmp(m.s[i].name, name) == 0)
            return i;
    return -1;
}

static int sem(void *ctx, const char *name, uint64_t cap, const scen_limits_t *lim)
{
    int s = name == NULL ? 0 : m.nsem++;
    (void)ctx;
    if (name != NULL) {
        snprintf(m.s[s].name, sizeof m.s[s].name, "%s", name);
        m.s[s].capacity = m.s[s].available = (int64_t)cap;
        m.s[s].last = -1;
    }
    m.s[s].tenant_max = lim->tenant_max;
    return 0;
}

static int request_parts(void *ctx, int label, scen_kind_t kind, const scen_part_t *parts, size_t n,
                         const char *tenant, int64_t timeout_ms)
{
    (void)ctx;
    if (m.closed)
        return SEMA_ECANCELED;
    for (size_t i = 0; i < n; i++) {
        int s = sem_index(parts[i].name);
        if (s < 0)
            return SEMA_ENOENT;
        if (kind != SCEN_WAIT_IDLE &&
            (parts[i].weight == 0 || (int64_t)parts[i].weight > m.s[s].capacity ||
             (m.s[s].tenant_max != 0 && parts[i].weight > m.s[s].tenant_max)))
            return SEMA_EINVAL;
        m.l[label].sem[i] = s;
        m.l[label].weight[i] = parts[i].weight;
    }
    m.l[label].nparts = (int)n;
    m.l[label].kind = kind;
    m.l[label].tenant = tenant_id(tenant);
    m.l[label].seq = ++m.seq;
    m.l[label].state = QUEUED;
    admit();
    if (m.l[label].state != QUEUED)
        return m.l[label].result;
    if (kind == SCEN_TRY || timeout_ms == 0) {
        m.l[label].state = IDLE;
        admit();
        return SEMA_EBUSY;
    }
    if (timeout_ms > 0) { /* the model's clock jumps: timed requests time out when polled */
        m.l[label].result = SEMA_ETIMEDOUT;
        m.l[label].kind |= TIMED;
    }
    return SCEN_QUEUED;
}

static int request(void *ctx, int label, scen_kind_t kind, uint64_t w, int64_t timeout_ms)
{
    scen_part_t p = {NULL, w};
    return request_parts(ctx, label, kind, &p, 1, NULL, timeout_ms);
}

static int release(void *ctx, int label, uint64_t w)
{
    (void)ctx;
    if (m.l[label].state != HOLDING)
        return SEMA_ESTALE;
    if (w == 0)
        w = m.l[label].weight[0];
    if (m.l[label].nparts == 1 && (int64_t)w > held_by(m.l[label].sem[0], -1))
        return SEMA_EOVERFLOW;
    for (int i = 0; i < m.l[label].nparts; i++) {
        uint64_t give = m.l[label].nparts == 1 ? w : m.l[label].weight[i];
        m.s[m.l[label].sem[i]].available += (int64_t)give;
        m.l[label].weight[i] -= give;
    }
    if (m.l[label].weight[0] == 0)
        m.l[label].state = SETTLED;
    admit();
    return 0;
}

static int cancel(void *ctx, int label)
{
    (void)ctx;
    m.l[label].state = SETTLED;
    m.l[label].result = SEMA_ECANCELED;
    admit();
    return 0;
}

static int relimit(void *ctx, uint64_t cap, const scen_limits_t *lim)
{
    msem_t *x = &m.s[0];
    (void)ctx;
    if (cap != 0) {
        x->available += (int64_t)cap - x->capacity;
        x->capacity = (int64_t)cap;
    }
    if (lim->set & SCEN_LIM_TENANT_MAX)
        x->tenant_max = lim->tenant_max;
    for (int i = 0; i < SCEN_MAX_LABELS; i++) {
        int p = part_on(i, 0);
        if (m.l[i].state == QUEUED && p >= 0 && (m.l[i].kind & 0xff) != SCEN_WAIT_IDLE &&
            ((int64_t)m.l[i].weight[p] > x->capacity ||
             (x->tenant_max != 0 && m.l[i].weight[p] > x->tenant_max))) {
            m.l[i].state = SETTLED;
            m.l[i].result = SEMA_EINVAL;
        }
    }
    admit();
    return 0;
}

static int resize(void *ctx, uint64_t cap)
{
    scen_limits_t none = {0};
    if (cap == 0)
        return SEMA_EINVAL;
    return relimit(ctx, cap, &none);
}

static int close_(void *ctx)
{
    (void)ctx;
    m.closed = 1;
    for (int i = 0; i < SCEN_MAX_LABELS; i++)
        if (m.l[i].state == QUEUED && part_on(i, 0) >= 0) {
            m.l[i].state = SETTLED;
            m.l[i].result = SEMA_ECANCELED;
        }
    admit();
    return 0;
}

static int state_of(void *ctx, const char *name, const char *tenant, scen_state_t *st)
{
    int s = sem_index(name), t = tenant != NULL ? tenant_id(tenant) : -1;
    (void)ctx;
    st->capacity = t < 0 ? m.s[s].capacity : SCEN_UNKNOWN;
    st->available = t < 0 ? m.s[s].available : SCEN_UNKNOWN;
    st->held = held_by(s, t);
    st->waiting = st->waiting_weight = 0;
    for (int i = 0; i < SCEN_MAX_LABELS; i++) {
        int p = part_on(i, s);
        if (m.l[i].state == QUEUED && p >= 0 && (t < 0 || m.l[i].tenant == t)) {
            st->waiting++;
            st->waiting_weight += (int64_t)m.l[i].weight[p];
        }
    }
    return 0;
}

static int state(void *ctx, scen_state_t *st)
{
    return state_of(ctx, NULL, NULL, st);
}

static int poll_(void *ctx, int label, int64_t wait_ms)
{
    (void)ctx;
    if (m.l[label].state == QUEUED && (m.l[label].kind & TIMED) && wait_ms > 1000) {
        m.l[label].state = SETTLED; /* its timeout passes while we wait */
        admit();
    }
    if (m.l[label].state == QUEUED)
        return SCEN_QUEUED;
    return m.l[label].result;
}

static const scen_host_t model_host = {
    .name = "model",
    .create = create,
    .destroy = destroy,
    .request = request,
    .release = release,
    .cancel = cancel,
    .resize = resize,
    .close = close_,
    .state = state,
    .poll = poll_,
    .sem = sem,
    .relimit = relimit,
    .request_parts = request_parts,
    .state_of = state_of,
};

TEST(shared_scenarios_against_the_model)
{
    scen_counts_t n;
    ASSERT_EQ(scen_run_file(NULL, &model_host, NULL, &n), 0);
    ASSERT_EQ(n.skipped_base, 0); /* every verb; no clock, so no rates */
}

TEST(runner_reports_a_wrong_expectation)
{
    const char *path = "scenario_bad.txt";
    FILE *f = fopen(path, "w");
    ASSERT_NOT_NULL(f);
    fputs("scenario wrong 2\nacquire a 2 => granted\nacquire b 1 => granted\nend\n", f);
    fclose(f);
    ASSERT_EQ(scen_run_file(path, &model_host, NULL, NULL), 1);
    remove(path);
}
