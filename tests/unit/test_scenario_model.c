/* SPDX-License-Identifier: MIT */
/* test_scenario_model.c - the shared scenario suite against a tiny single-threaded model of
 * docs/semantics.md, to keep the data file and its runner honest. */
#include "scenario.h"
#include "test.h"

enum { IDLE, QUEUED, HOLDING, SETTLED };

typedef struct {
    int64_t capacity, available;
    int closed;
    struct {
        int state, kind, result;
        uint64_t weight;
        uint64_t seq; /* queue order */
    } l[SCEN_MAX_LABELS];
    uint64_t seq;
} model_t;

static model_t m;

static int head(void)
{
    int best = -1;
    for (int i = 0; i < SCEN_MAX_LABELS; i++)
        if (m.l[i].state == QUEUED && (best < 0 || m.l[i].seq < m.l[best].seq))
            best = i;
    return best;
}

static int64_t held(void)
{
    int64_t h = 0;
    for (int i = 0; i < SCEN_MAX_LABELS; i++)
        if (m.l[i].state == HOLDING)
            h += (int64_t)m.l[i].weight;
    return h;
}

static void admit(void)
{
    for (int h; (h = head()) >= 0;) {
        if (m.l[h].kind == SCEN_WAIT_IDLE) {
            if (held() != 0)
                return;
            m.l[h].state = SETTLED;
            m.l[h].result = 0;
            continue;
        }
        if ((int64_t)m.l[h].weight > m.available)
            return;
        m.available -= (int64_t)m.l[h].weight;
        m.l[h].state = HOLDING;
        m.l[h].result = 0;
    }
}

static int create(void *ctx, uint64_t cap)
{
    memset(&m, 0, sizeof(m));
    m.capacity = m.available = (int64_t)cap;
    return 0;
}

static void destroy(void *ctx)
{
}

static int request(void *ctx, int label, scen_kind_t kind, uint64_t w, int64_t timeout_ms)
{
    if (m.closed)
        return SEMA_ECANCELED;
    if (kind != SCEN_WAIT_IDLE && (w == 0 || (int64_t)w > m.capacity))
        return SEMA_EINVAL;
    m.l[label].kind = kind;
    m.l[label].weight = w;
    m.l[label].seq = ++m.seq;
    m.l[label].state = QUEUED;
    admit();
    if (m.l[label].state != QUEUED)
        return m.l[label].result;
    if (kind == SCEN_TRY || timeout_ms == 0) {
        m.l[label].state = IDLE;
        return SEMA_EBUSY;
    }
    if (timeout_ms > 0) { /* the model's clock jumps: timed requests time out when polled */
        m.l[label].result = SEMA_ETIMEDOUT;
        m.l[label].kind |= 0x100;
    }
    return SCEN_QUEUED;
}

static int release(void *ctx, int label, uint64_t w)
{
    if (m.l[label].state != HOLDING)
        return SEMA_ESTALE;
    if (w == 0)
        w = m.l[label].weight;
    if ((int64_t)w > held())
        return SEMA_EOVERFLOW;
    m.available += (int64_t)w;
    m.l[label].weight -= w;
    if (m.l[label].weight == 0)
        m.l[label].state = SETTLED;
    admit();
    return 0;
}

static int cancel(void *ctx, int label)
{
    m.l[label].state = SETTLED;
    m.l[label].result = SEMA_ECANCELED;
    admit();
    return 0;
}

static int resize(void *ctx, uint64_t cap)
{
    if (cap == 0)
        return SEMA_EINVAL;
    m.available += (int64_t)cap - m.capacity;
    m.capacity = (int64_t)cap;
    for (int i = 0; i < SCEN_MAX_LABELS; i++)
        if (m.l[i].state == QUEUED && (m.l[i].kind & 0xff) != SCEN_WAIT_IDLE &&
            (int64_t)m.l[i].weight > m.capacity) {
            m.l[i].state = SETTLED;
            m.l[i].result = SEMA_EINVAL;
        }
    admit();
    return 0;
}

static int close_(void *ctx)
{
    m.closed = 1;
    for (int i = 0; i < SCEN_MAX_LABELS; i++)
        if (m.l[i].state == QUEUED) {
            m.l[i].state = SETTLED;
            m.l[i].result = SEMA_ECANCELED;
        }
    return 0;
}

static int state(void *ctx, scen_state_t *st)
{
    st->capacity = m.capacity;
    st->available = m.available;
    st->held = held();
    st->waiting = st->waiting_weight = 0;
    for (int i = 0; i < SCEN_MAX_LABELS; i++)
        if (m.l[i].state == QUEUED) {
            st->waiting++;
            st->waiting_weight += (int64_t)m.l[i].weight;
        }
    return 0;
}

static int poll_(void *ctx, int label, int64_t wait_ms)
{
    if (m.l[label].state == QUEUED && (m.l[label].kind & 0x100) && wait_ms > 1000) {
        m.l[label].state = SETTLED; /* its timeout passes while we wait */
        admit();
    }
    if (m.l[label].state == QUEUED)
        return SCEN_QUEUED;
    return m.l[label].result;
}

TEST(shared_scenarios_against_the_model)
{
    scen_host_t host = {"model", NULL,   create, destroy, request, release,
                        cancel,  resize, close_, state,   poll_};
    int skipped = -1;
    ASSERT_EQ(scen_run_file(NULL, &host, NULL, &skipped), 0);
    ASSERT_EQ(skipped, 0);
}

TEST(runner_reports_a_wrong_expectation)
{
    const char *path = "scenario_bad.txt";
    FILE *f = fopen(path, "w");
    ASSERT_NOT_NULL(f);
    fputs("scenario wrong 2\nacquire a 2 => granted\nacquire b 1 => granted\nend\n", f);
    fclose(f);
    scen_host_t host = {"model", NULL,   create, destroy, request, release,
                        cancel,  resize, close_, state,   poll_};
    ASSERT_EQ(scen_run_file(path, &host, NULL, NULL), 1);
    remove(path);
}
