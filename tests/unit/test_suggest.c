/* SPDX-License-Identifier: MIT */
/* test_suggest.c - "did you mean": the closest known word to a mistyped one. */
#include <stddef.h>

#include "common/suggest.h"
#include "test.h"

static const char *closest(const char *word)
{
    static const char *const known[] = {"listen", "lock-readers", "log-requests", "ls",
                                        "rm",     "create",       "ticket-leave", "ttl"};
    suggest_t s;

    suggest_init(&s, word);
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        suggest_offer(&s, known[i]);
    return suggest_best(&s);
}

TEST(one_or_two_edits_are_typos)
{
    ASSERT_STREQ(closest("lsten"), "listen");              /* a deletion */
    ASSERT_STREQ(closest("listenn"), "listen");            /* an insertion */
    ASSERT_STREQ(closest("crate"), "create");              /* a deletion in a verb */
    ASSERT_STREQ(closest("tll"), "ttl");                   /* a substitution in a short word */
    ASSERT_STREQ(closest("ticket-laeve"), "ticket-leave"); /* a swap counts once */
    ASSERT_STREQ(closest("lsiten"), "listen");
}

TEST(far_or_exact_words_get_no_suggestion)
{
    ASSERT_NULL(closest("bogus-thing"));
    ASSERT_NULL(closest("xy"));     /* 2 edits from ls and rm: too many for 2 bytes */
    ASSERT_NULL(closest("listen")); /* not a typo */
    ASSERT_NULL(closest(""));
}
