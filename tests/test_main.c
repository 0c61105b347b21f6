/* SPDX-License-Identifier: MIT */
/* test_main.c - entry point of every unit-test program: list, run one, or run all cases. */
#include "test.h"

#include <unistd.h>

#define MAX_TESTS 512

static struct {
    const char *name;
    test_fn fn;
} tests[MAX_TESTS];
static int ntests;

void test_register(const char *name, test_fn fn)
{
    if (ntests == MAX_TESTS) {
        fprintf(stderr, "too many tests in one program (max %d)\n", MAX_TESTS);
        abort();
    }
    tests[ntests].name = name;
    tests[ntests].fn = fn;
    ntests++;
}

long test_scale(long n)
{
    const char *s = getenv("SEMA_TEST_SCALE");
    double scale = s != NULL ? strtod(s, NULL) : 1.0;
    long v = (long)((double)n * (scale > 0 ? scale : 1.0));

    return v < 1 ? 1 : v;
}

static int run(int i)
{
    fprintf(stderr, "== %s\n", tests[i].name);
    tests[i].fn();
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (int i = 0; i < ntests; i++)
            printf("%s\n", tests[i].name);
        return 0;
    }
    if (argc == 2) {
        for (int i = 0; i < ntests; i++)
            if (strcmp(tests[i].name, argv[1]) == 0)
                return run(i);
        fprintf(stderr, "no test named %s\n", argv[1]);
        return 2;
    }
    for (int i = 0; i < ntests; i++)
        run(i);
    printf("%d passed, 0 failed\n", ntests);
    return 0;
}
