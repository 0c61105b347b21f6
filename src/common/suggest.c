/* SPDX-License-Identifier: MIT */
/* suggest.c - the closest known word to a mistyped one, by edit distance. */
#include "common/suggest.h"

#include <string.h>

enum { SUGGEST_MAX_LEN = 63 /* longer words are not typos of a flag or verb */ };

static size_t min3(size_t a, size_t b, size_t c)
{
    size_t m = a < b ? a : b;
    return m < c ? m : c;
}

/* Edit distance with swaps of neighbours (optimal string alignment), three rows. */
static size_t distance(const char *a, size_t n, const char *b, size_t m)
{
    size_t rows[3][SUGGEST_MAX_LEN + 1];
    size_t *prev2 = rows[0], *prev = rows[1], *cur = rows[2];

    for (size_t j = 0; j <= m; j++)
        prev[j] = j;
    for (size_t i = 1; i <= n; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t cost = a[i - 1] != b[j - 1];
            cur[j] = min3(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost);
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                prev2[j - 2] + 1 < cur[j])
                cur[j] = prev2[j - 2] + 1;
        }
        size_t *t = prev2;
        prev2 = prev;
        prev = cur;
        cur = t;
    }
    return prev[m];
}

void suggest_init(suggest_t *s, const char *word)
{
    s->word = word;
    s->best = NULL;
    s->dist = (size_t)-1;
}

void suggest_offer(suggest_t *s, const char *candidate)
{
    size_t n = strlen(s->word), m = strlen(candidate);

    if (n == 0 || n > SUGGEST_MAX_LEN || m > SUGGEST_MAX_LEN)
        return;
    size_t d = distance(s->word, n, candidate, m);
    if (d < s->dist) {
        s->dist = d;
        s->best = candidate;
    }
}

const char *suggest_best(const suggest_t *s)
{
    size_t limit = strlen(s->word) <= 4 ? 1 : 2;

    return s->best != NULL && s->dist > 0 && s->dist <= limit ? s->best : NULL;
}
