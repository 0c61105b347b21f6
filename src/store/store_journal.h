/* SPDX-License-Identifier: MIT */
/* store_journal.h - the embedded store's journal: an append-only file of checksummed
 * records that a group commit writes (and, in strict, syncs) before its replies go out.
 * The store applies what it holds to the SQLite database at each checkpoint, then starts
 * the journal over; at open it applies whatever a crash left in it. The journal knows
 * bytes, not mutations: store_sqlite.c encodes and decodes the records' bodies. Never
 * included outside src/store. */
#ifndef SEMAD_STORE_JOURNAL_H
#define SEMAD_STORE_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#define STORE_JOURNAL_NAME "sema.journal"
#define JNL_RECORD_HEAD 32u /* the bytes a record's body follows: reserve them in the buffer */

typedef struct jnl jnl_t;

/* Called for each valid record in order: its body and how many mutations it holds. Returns
 * 0 to go on, or an error code that stops the replay and is returned. */
typedef int (*jnl_record_fn)(void *arg, const unsigned char *body, size_t len, uint32_t nops);

/* Open DIR/sema.journal, creating and preallocating it if missing (zero-filled and synced,
 * so a commit's sync writes data only, never the file's size). Returns 0 or a SEMA_E* code
 * with a message naming the file. */
int jnl_open(jnl_t **out, const char *dir, char *errbuf, size_t errlen);

/* Call fn for every record of the current generation, in order, up to the first one that
 * is missing, torn or of an older generation; the next append goes after the last valid
 * one. */
int jnl_replay(jnl_t *j, jnl_record_fn fn, void *arg, char *errbuf, size_t errlen);

/* Append one record: buf holds JNL_RECORD_HEAD bytes for the head (filled in here) then
 * the body, `len` bytes in all. With `sync`, fdatasync before returning. Returns 0, or an
 * errno value (nothing of the record counts: a later append overwrites it). */
int jnl_append(jnl_t *j, unsigned char *buf, size_t len, uint32_t nops, int sync);

/* Start over: a new generation in the header (written and synced), so every record
 * before it is void. Call only once what they hold is durable elsewhere. 0 or errno. */
int jnl_reset(jnl_t *j);

/* Bytes of records since the last reset. */
uint64_t jnl_used(const jnl_t *j);

/* Whether the records since the last reset have outgrown the preallocated file. */
int jnl_full(const jnl_t *j);

void jnl_close(jnl_t *j);

/* Read-only, for `semad --check`: call fn (if not NULL) for the valid records of
 * DIR/sema.journal and count them and the mutations in them (0 and 0 when there is no
 * journal); *gen (if not NULL) gets the generation read. Returns 0, fn's error, or a SEMA_E*
 * code. */
int jnl_scan(const char *dir, jnl_record_fn fn, void *arg, uint64_t *records, uint64_t *ops,
             uint64_t *gen, char *errbuf, size_t errlen);

#endif /* SEMAD_STORE_JOURNAL_H */
