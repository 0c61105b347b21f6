/* SPDX-License-Identifier: MIT */
/* scenario.c - parser and driver of the shared semantics suite (see scenario.h). */
#include "scenario.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SEMA_SCENARIO_FILE
#define SEMA_SCENARIO_FILE "tests/cases/scenarios.txt"
#endif

#define MAX_TOKENS 16
#define MAX_LINES 256
#define SETTLE_MS 30 /* `still`: how long nothing may settle */
#define NOW_WAIT_MS 5000

typedef struct {
    int lineno;
    int ntok;
    char *tok[MAX_TOKENS]; /* command tokens before "=>" */
    char *expect;          /* token after "=>", or NULL */
} line_t;

typedef struct {
    char name[128];
    uint64_t capacity;
    scen_limits_t lim; /* of its own semaphore: `scenario NAME CAP tenant_max=T rate=R burst=B` */
    int nlines;
    line_t lines[MAX_LINES];
    char labels[SCEN_MAX_LABELS][32];
    int nlabels;
} scenario_t;

static const struct {
    const char *word;
    int code;
} results[] = {
    {"granted", 0},
    {"ok", 0},
    {"done", 0},
    {"queued", SCEN_QUEUED},
    {"invalid", SEMA_EINVAL},
    {"busy", SEMA_EBUSY},
    {"stale", SEMA_ESTALE},
    {"overflow", SEMA_EOVERFLOW},
    {"canceled", SEMA_ECANCELED},
    {"timedout", SEMA_ETIMEDOUT},
};

static int result_code(const char *word, int *code)
{
    for (size_t i = 0; i < sizeof(results) / sizeof(results[0]); i++) {
        if (strcmp(results[i].word, word) == 0) {
            *code = results[i].code;
            return 0;
        }
    }
    return -1;
}

static const char *code_word(int code)
{
    if (code == SCEN_QUEUED)
        return "queued";
    if (code == 0)
        return "granted/ok/done";
    return sema_err_name(code);
}

static int label_of(scenario_t *sc, const char *name)
{
    for (int i = 0; i < sc->nlabels; i++)
        if (strcmp(sc->labels[i], name) == 0)
            return i;
    if (sc->nlabels == SCEN_MAX_LABELS || strlen(name) >= sizeof(sc->labels[0]))
        return -1;
    snprintf(sc->labels[sc->nlabels], sizeof(sc->labels[0]), "%s", name);
    return sc->nlabels++;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);

    if (*s == '\0' || *end != '\0' || *s == '-')
        return -1;
    *out = v;
    return 0;
}

/* "timeout=MS" as the last command token, or -1 (forever). */
static int64_t timeout_of(const line_t *ln, int from)
{
    for (int i = from; i < ln->ntok; i++)
        if (strncmp(ln->tok[i], "timeout=", 8) == 0)
            return strtoll(ln->tok[i] + 8, NULL, 10);
    return -1;
}

/* The value of token "KEY=VALUE" among tok[from..], or NULL. */
static const char *opt_of(char *const *tok, int ntok, int from, const char *key)
{
    size_t n = strlen(key);

    for (int i = from; i < ntok; i++)
        if (strncmp(tok[i], key, n) == 0 && tok[i][n] == '=')
            return tok[i] + n + 1;
    return NULL;
}

/* tenant_max=T rate=R burst=B among tok[from..]. */
static scen_limits_t limits_of(char *const *tok, int ntok, int from)
{
    static const struct {
        const char *key;
        unsigned bit;
    } keys[] = {
        {"tenant_max", SCEN_LIM_TENANT_MAX}, {"rate", SCEN_LIM_RATE}, {"burst", SCEN_LIM_BURST}};
    scen_limits_t l = {0};
    uint64_t *to[] = {&l.tenant_max, &l.rate_per_s, &l.rate_burst};

    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *v = opt_of(tok, ntok, from, keys[i].key);
        if (v != NULL) {
            *to[i] = strtoull(v, NULL, 10);
            l.set |= keys[i].bit;
        }
    }
    return l;
}

/* An acquire or try naming semaphores ("gpu:2,db:1") or a tenant, rather than a weight. */
static int uses_parts(const line_t *ln)
{
    return ln->ntok > 2 &&
           (strchr(ln->tok[2], ':') != NULL || opt_of(ln->tok, ln->ntok, 3, "tenant") != NULL);
}

/* What a line needs beyond the base verbs, or NULL. */
static const char *limits_verb(const line_t *ln, const scen_host_t *h)
{
    const char *v = ln->tok[0];

    if (strcmp(v, "sem") == 0 && h->sem == NULL)
        return "sem";
    if ((strcmp(v, "acquire") == 0 || strcmp(v, "try") == 0) && uses_parts(ln) &&
        h->request_parts == NULL)
        return "several semaphores or tenants";
    if ((strcmp(v, "acquire") == 0 || strcmp(v, "try") == 0) && uses_parts(ln) && h->one_sem_only &&
        strchr(ln->tok[2], ':') != NULL)
        return "several semaphores";
    if (strcmp(v, "resize") == 0 && limits_of(ln->tok, ln->ntok, 2).set && h->relimit == NULL)
        return "limits";
    if ((strcmp(v, "resize") == 0 || strcmp(v, "sem") == 0) && !h->rates &&
        (limits_of(ln->tok, ln->ntok, 2).set & (SCEN_LIM_RATE | SCEN_LIM_BURST)))
        return "rates";
    if (strcmp(v, "state") == 0 && h->state_of == NULL &&
        (opt_of(ln->tok, ln->ntok, 1, "on") != NULL || opt_of(ln->tok, ln->ntok, 1, "tenant")))
        return "state of another semaphore or a tenant";
    return NULL;
}

/* Does the host have what this scenario needs? Returns the missing verb or NULL; *base
 * says whether it is one of the base verbs. */
static const char *missing_verb(const scen_host_t *h, const scenario_t *sc, int *base)
{
    *base = 0;
    if (sc->lim.set && h->sem == NULL)
        return "limits";
    if ((sc->lim.set & (SCEN_LIM_RATE | SCEN_LIM_BURST)) && !h->rates)
        return "rates";
    for (int i = 0; i < sc->nlines; i++) {
        const char *miss = limits_verb(&sc->lines[i], h);
        if (miss != NULL)
            return miss;
    }
    *base = 1;
    for (int i = 0; i < sc->nlines; i++) {
        const char *v = sc->lines[i].tok[0];
        if (strcmp(v, "resize") == 0 && h->resize == NULL)
            return "resize";
        if (strcmp(v, "close") == 0 && h->close == NULL)
            return "close";
        if (strcmp(v, "cancel") == 0 && h->cancel == NULL)
            return "cancel";
        if (strcmp(v, "state") == 0 && h->state == NULL)
            return "state";
        if (strcmp(v, "waitidle") == 0 && h->request == NULL)
            return "waitidle";
    }
    return NULL;
}

static int fail(const scenario_t *sc, const line_t *ln, const char *fmt, const char *a,
                const char *b)
{
    fprintf(stderr, "  scenario %s FAILED at scenarios.txt:%d (%s", sc->name, ln->lineno,
            ln->tok[0]);
    for (int i = 1; i < ln->ntok; i++)
        fprintf(stderr, " %s", ln->tok[i]);
    fprintf(stderr, "): ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    return -1;
}

static int check_result(const scenario_t *sc, const line_t *ln, int got)
{
    int want;

    if (ln->expect == NULL)
        return 0;
    if (result_code(ln->expect, &want) != 0)
        return fail(sc, ln, "unknown result word %s%s", ln->expect, "");
    if (got != want)
        return fail(sc, ln, "expected %s, got %s", ln->expect, code_word(got));
    return 0;
}

/* A request with a timeout that comes back ETIMEDOUT waited its whole timeout in the queue:
 * where the line expects `queued` (a machine too busy to see it there before it gave up),
 * that is what it was; the `now L => timedout` that follows reads its outcome. */
static int check_request(const scenario_t *sc, const line_t *ln, int got, int64_t timeout_ms)
{
    int want;

    if (got == SEMA_ETIMEDOUT && timeout_ms > 0 && ln->expect != NULL &&
        result_code(ln->expect, &want) == 0 && want == SCEN_QUEUED)
        got = SCEN_QUEUED;
    return check_result(sc, ln, got);
}

static int check_state(const scen_host_t *h, const scenario_t *sc, const line_t *ln)
{
    scen_state_t st;
    const char *on = opt_of(ln->tok, ln->ntok, 1, "on");
    const char *tenant = opt_of(ln->tok, ln->ntok, 1, "tenant");
    int rc =
        on != NULL || tenant != NULL ? h->state_of(h->ctx, on, tenant, &st) : h->state(h->ctx, &st);

    if (rc != 0)
        return fail(sc, ln, "state() failed: %s%s", sema_strerror(rc), "");
    for (int i = 1; i < ln->ntok; i++) {
        char key[32];
        const char *eq = strchr(ln->tok[i], '=');
        int64_t want, got;

        if (eq == NULL || (size_t)(eq - ln->tok[i]) >= sizeof(key))
            return fail(sc, ln, "bad state field %s%s", ln->tok[i], "");
        memcpy(key, ln->tok[i], (size_t)(eq - ln->tok[i]));
        key[eq - ln->tok[i]] = '\0';
        want = strtoll(eq + 1, NULL, 10);
        if (strcmp(key, "capacity") == 0)
            got = st.capacity;
        else if (strcmp(key, "available") == 0)
            got = st.available;
        else if (strcmp(key, "held") == 0)
            got = st.held;
        else if (strcmp(key, "waiting") == 0)
            got = st.waiting;
        else if (strcmp(key, "waiting_weight") == 0)
            got = st.waiting_weight;
        else if (strcmp(key, "on") == 0 || strcmp(key, "tenant") == 0)
            continue; /* which state: see above */
        else
            return fail(sc, ln, "unknown state field %s%s", key, "");
        if (got == SCEN_UNKNOWN)
            continue;
        if (got != want) {
            char w[32], g[32];
            snprintf(w, sizeof(w), "%lld", (long long)want);
            snprintf(g, sizeof(g), "%lld", (long long)got);
            fprintf(stderr, "  (field %s)\n", key);
            return fail(sc, ln, "expected %s, got %s", w, g);
        }
    }
    return 0;
}

/* `now L... => R` and `still L...`. */
static int check_settled(const scen_host_t *h, scenario_t *sc, const line_t *ln, int still)
{
    int want = SCEN_QUEUED;

    if (!still && (ln->expect == NULL || result_code(ln->expect, &want) != 0))
        return fail(sc, ln, "`now` needs => RESULT%s%s", "", "");
    for (int i = 1; i < ln->ntok; i++) {
        int label = label_of(sc, ln->tok[i]);
        int got = h->poll(h->ctx, label, still ? SETTLE_MS : NOW_WAIT_MS);
        if (got != want)
            return fail(sc, ln, "label %s: %s", ln->tok[i], code_word(got));
    }
    return 0;
}

/* "gpu:2,db:1" (a name without ":W" weighs 1; "main" is the scenario's own semaphore) into
 * parts whose names point into `buf` (a copy). Returns how many, or -1. */
static int parts_of(const char *spec, char *buf, size_t len, scen_part_t *parts)
{
    int n = 0;

    snprintf(buf, len, "%s", spec);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(tok, ':');
        if (n == SCEN_MAX_PARTS)
            return -1;
        parts[n].weight = 1;
        if (colon != NULL) {
            *colon = '\0';
            if (parse_u64(colon + 1, &parts[n].weight) != 0)
                return -1;
        }
        parts[n].name = strcmp(tok, "main") == 0 ? NULL : tok;
        n++;
    }
    return n;
}

/* acquire/try L (W | A:w,B:w) [timeout=MS] [tenant=T] on semad's limits. */
static int run_parts(const scen_host_t *h, scenario_t *sc, const line_t *ln, int label, int is_try)
{
    scen_part_t parts[SCEN_MAX_PARTS];
    char buf[256];
    const char *tenant = opt_of(ln->tok, ln->ntok, 3, "tenant");
    int64_t t = is_try ? 0 : timeout_of(ln, 3);
    int n;

    if (strchr(ln->tok[2], ':') != NULL) {
        n = parts_of(ln->tok[2], buf, sizeof buf, parts);
    } else {
        n = 1;
        parts[0].name = NULL;
        if (parse_u64(ln->tok[2], &parts[0].weight) != 0)
            n = -1;
    }
    if (n <= 0)
        return fail(sc, ln, "usage: %s L W|NAME:W,... [timeout=MS] [tenant=T]%s", ln->tok[0], "");
    return check_request(sc, ln,
                         h->request_parts(h->ctx, label, is_try ? SCEN_TRY : SCEN_ACQUIRE, parts,
                                          (size_t)n, tenant, t),
                         t);
}

static int run_line(const scen_host_t *h, scenario_t *sc, const line_t *ln)
{
    const char *v = ln->tok[0];
    uint64_t w = 0;
    int label = ln->ntok > 1 ? label_of(sc, ln->tok[1]) : -1;

    if (strcmp(v, "sem") == 0) {
        scen_limits_t lim = limits_of(ln->tok, ln->ntok, 3);
        if (ln->ntok < 3 || parse_u64(ln->tok[2], &w) != 0)
            return fail(sc, ln, "usage: sem NAME CAPACITY [tenant_max=T] [rate=R] [burst=B]%s%s",
                        "", "");
        return check_result(sc, ln, h->sem(h->ctx, ln->tok[1], w, &lim));
    }
    if ((strcmp(v, "acquire") == 0 || strcmp(v, "try") == 0) && label >= 0 && uses_parts(ln))
        return run_parts(h, sc, ln, label, v[0] == 't');
    if (strcmp(v, "acquire") == 0 || strcmp(v, "try") == 0) {
        if (ln->ntok < 3 || label < 0 || parse_u64(ln->tok[2], &w) != 0)
            return fail(sc, ln, "usage: %s L W%s", v, "");
        int is_try = v[0] == 't';
        int64_t t = is_try ? 0 : timeout_of(ln, 3);
        return check_request(sc, ln,
                             h->request(h->ctx, label, is_try ? SCEN_TRY : SCEN_ACQUIRE, w, t), t);
    }
    if (strcmp(v, "waitidle") == 0) {
        if (label < 0)
            return fail(sc, ln, "usage: waitidle L%s%s", "", "");
        int64_t t = timeout_of(ln, 2);
        return check_request(sc, ln, h->request(h->ctx, label, SCEN_WAIT_IDLE, 0, t), t);
    }
    if (strcmp(v, "release") == 0) {
        if (label < 0 || (ln->ntok > 2 && parse_u64(ln->tok[2], &w) != 0))
            return fail(sc, ln, "usage: release L [W]%s%s", "", "");
        return check_result(sc, ln, h->release(h->ctx, label, w));
    }
    if (strcmp(v, "cancel") == 0)
        return label < 0 ? fail(sc, ln, "usage: cancel L%s%s", "", "")
                         : check_result(sc, ln, h->cancel(h->ctx, label));
    if (strcmp(v, "resize") == 0) {
        scen_limits_t lim = limits_of(ln->tok, ln->ntok, 2);
        if (ln->ntok < 2 || parse_u64(ln->tok[1], &w) != 0)
            return fail(sc, ln, "usage: resize N [tenant_max=T] [rate=R] [burst=B]%s%s", "", "");
        return check_result(sc, ln, lim.set ? h->relimit(h->ctx, w, &lim) : h->resize(h->ctx, w));
    }
    if (strcmp(v, "close") == 0)
        return check_result(sc, ln, h->close(h->ctx));
    if (strcmp(v, "state") == 0)
        return check_state(h, sc, ln);
    if (strcmp(v, "now") == 0 || strcmp(v, "still") == 0)
        return check_settled(h, sc, ln, v[0] == 's');
    return fail(sc, ln, "unknown verb %s%s", v, "");
}

/* Split `buf` in place into tokens; "=>" separates the expectation. */
static int tokenize(char *buf, line_t *ln)
{
    char *save = NULL;
    int after = 0;

    ln->ntok = 0;
    ln->expect = NULL;
    for (char *t = strtok_r(buf, " \t\r\n", &save); t != NULL;
         t = strtok_r(NULL, " \t\r\n", &save)) {
        if (strcmp(t, "=>") == 0) {
            after = 1;
        } else if (after) {
            ln->expect = t;
        } else if (ln->ntok < MAX_TOKENS) {
            ln->tok[ln->ntok++] = t;
        }
    }
    return ln->ntok;
}

static int run_scenario(const scen_host_t *h, scenario_t *sc, scen_counts_t *counts)
{
    int base;
    const char *miss = missing_verb(h, sc, &base);
    int rc;

    if (miss != NULL) {
        fprintf(stderr, "  scenario %s: skipped (the %s host has no `%s`)\n", sc->name, h->name,
                miss);
        counts->skipped++;
        counts->skipped_base += base;
        return 0;
    }
    rc = h->create(h->ctx, sc->capacity);
    if (rc == 0 && sc->lim.set)
        rc = h->sem(h->ctx, NULL, sc->capacity, &sc->lim);
    if (rc != 0) {
        fprintf(stderr, "  scenario %s FAILED: create(%llu): %s\n", sc->name,
                (unsigned long long)sc->capacity, sema_strerror(rc));
        return -1;
    }
    sc->nlabels = 0;
    for (int i = 0; i < sc->nlines; i++) {
        if (run_line(h, sc, &sc->lines[i]) != 0) {
            h->destroy(h->ctx);
            return -1;
        }
    }
    h->destroy(h->ctx);
    fprintf(stderr, "  scenario %s: ok\n", sc->name);
    return 0;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;

    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    buf = malloc((size_t)n + 1);
    if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf != NULL)
        buf[n] = '\0';
    fclose(f);
    return buf;
}

int scen_run_file(const char *path, const scen_host_t *host, const char *only,
                  scen_counts_t *counts)
{
    char *text = read_file(path != NULL ? path : SEMA_SCENARIO_FILE);
    scenario_t *sc = calloc(1, sizeof(*sc));
    scen_counts_t cn = {0};
    int failures = 0, ran = 0, lineno = 0, in = 0;
    if (text == NULL || sc == NULL) {
        fprintf(stderr, "scenario: cannot read %s\n", path != NULL ? path : SEMA_SCENARIO_FILE);
        free(text);
        free(sc);
        return 1;
    }
    /* strtok_r on "\n" would merge blank lines and lose line numbers: split by hand. */
    for (char *line = text; line != NULL;) {
        char *nl = strchr(line, '\n');
        line_t ln;
        if (nl != NULL)
            *nl = '\0';
        lineno++;
        char *hash = strchr(line, '#');
        if (hash != NULL)
            *hash = '\0';
        if (tokenize(line, &ln) > 0) {
            ln.lineno = lineno;
            if (strcmp(ln.tok[0], "scenario") == 0 && ln.ntok >= 3) {
                snprintf(sc->name, sizeof(sc->name), "%s", ln.tok[1]);
                if (parse_u64(ln.tok[2], &sc->capacity) != 0)
                    sc->capacity = 0;
                sc->lim = limits_of(ln.tok, ln.ntok, 3);
                sc->nlines = 0;
                in = 1;
            } else if (strcmp(ln.tok[0], "end") == 0 && in) {
                in = 0;
                if (only == NULL || strcmp(only, sc->name) == 0) {
                    ran++;
                    if (run_scenario(host, sc, &cn) != 0)
                        failures++;
                }
            } else if (in && sc->nlines < MAX_LINES) {
                sc->lines[sc->nlines++] = ln;
            }
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    fprintf(stderr, "%s host: %d scenarios run, %d failed, %d skipped\n", host->name, ran, failures,
            cn.skipped);
    if (ran == 0) {
        fprintf(stderr, "scenario: nothing matched%s%s\n", only ? " " : "", only ? only : "");
        failures++;
    }
    cn.run = ran;
    cn.failed = failures;
    if (counts != NULL)
        *counts = cn;
    free(text);
    free(sc);
    return failures;
}
