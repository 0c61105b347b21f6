/* SPDX-License-Identifier: MIT */
/* test_sem_tour.c - builds examples/sem_tour.c with the tests and runs it, so the tour cannot rot.
 */
#include "test.h"

/* The tour is a program of its own: rename its main so it can run as one case here. */
#define main sem_tour_main
#include "../../examples/sem_tour.c"
#undef main

TEST(tour_runs_to_completion)
{
    ASSERT_EQ(sem_tour_main(), 0);
}
