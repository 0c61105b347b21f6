/* SPDX-License-Identifier: MIT */
/* suggest.h - "did you mean --listen?": the known word closest to a mistyped one, for the
 * usage errors of semad and sema (which compiles this file too, as it does auth.c). */
#ifndef SEMAD_SUGGEST_H
#define SEMAD_SUGGEST_H

#include <stddef.h>

typedef struct {
    const char *word; /* what was typed; borrowed */
    const char *best; /* the closest candidate so far, or NULL; borrowed */
    size_t dist;      /* its edit distance from word */
} suggest_t;

/* Start looking for the candidate closest to `word` (borrowed until the last call). */
void suggest_init(suggest_t *s, const char *word);

/* Weigh one candidate (borrowed until the last call); the first of equals wins. */
void suggest_offer(suggest_t *s, const char *candidate);

/* The closest candidate if it is a likely typo of the word (1 edit for words of up to 4
 * bytes, 2 for longer ones; an edit inserts, deletes or replaces a byte or swaps two
 * neighbours), else NULL. Never allocates. */
const char *suggest_best(const suggest_t *s);

#endif /* SEMAD_SUGGEST_H */
