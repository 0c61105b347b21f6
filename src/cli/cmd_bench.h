/* SPDX-License-Identifier: MIT */
/* cmd_bench.h - the entry point of `sema bench` for the command table. */
#ifndef SEMA_CLI_CMD_BENCH_H
#define SEMA_CLI_CMD_BENCH_H

/* The text of `sema bench --help`. */
extern const char cmd_bench_usage[];

/* Runs `sema bench` with argv[0] = "bench"; see its --help. Returns the exit status (CLI_EXIT_*: 0
 * done, 1 the run failed, 2 bad arguments, 69 the server cannot be reached). Blocks for the run;
 * prints the report on stdout. Not thread-safe (uses getopt). */
int cmd_bench(int argc, char **argv);

#endif /* SEMA_CLI_CMD_BENCH_H */
