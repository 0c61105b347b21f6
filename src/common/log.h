/* SPDX-License-Identifier: MIT */
/* log.h - semad's log: one line per event on stderr, with a UTC timestamp and a level. */
#ifndef SEMAD_LOG_H
#define SEMAD_LOG_H

typedef enum { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3 } log_level_t;

/* Lines below `level` are dropped. Not thread-safe against concurrent log calls. */
void log_set_level(log_level_t level);

/* Write one line (printf format; a trailing newline is added, embedded newlines are
 * replaced). One write(2) per line, so lines never interleave. Never blocks on locks. */
void log_msg(log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif /* SEMAD_LOG_H */
