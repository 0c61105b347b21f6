/* SPDX-License-Identifier: MIT */
/* store_sqlite.h - constants of the embedded store's file format, shared by the store and
 * its offline checker; never included outside src/store. */
#ifndef SEMAD_STORE_SQLITE_H
#define SEMAD_STORE_SQLITE_H

/* Bump STORE_FORMAT when the schema changes; an older semad then refuses the file
 * (SEMA_EVERSION) instead of misreading it, and this one upgrades an older file in place
 * when it opens it (store_sqlite.c, migrate()). Format 2 added leases.principal, 3 the tickets
 * table, 4 the limits beside a semaphore's capacity and the tenants and parts of leases and
 * tickets. */
#define STORE_APP_ID 0x53454D41 /* "SEMA", the database header's application_id */
#define STORE_FORMAT 4
#define STORE_FORMAT_OLDEST                                                                        \
    1 /* still opened: upgraded in place (2 adds leases' tokens, 3 tickets, 4 limits) */
#define STORE_DB_NAME "sema.db"
#define STORE_LOCK_NAME "LOCK"

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

struct sqlite3;

/* The parts of a lease or ticket on several semaphores as one BLOB column: for each, its
 * weight and fence (or place) as 8 bytes each, its name's length as 4, the name and a NUL.
 * store_parts_size() is the BLOB's size; store_parts_encode() writes it into `out`;
 * store_parts_decode() fills up to `max` parts whose names point into `blob` (which must
 * stay alive) and returns how many, or -1 when the BLOB is malformed. */
size_t store_parts_size(const store_part_t *parts, size_t n);
void store_parts_encode(const store_part_t *parts, size_t n, unsigned char *out);
int store_parts_decode(const void *blob, size_t len, store_part_t *parts, size_t max);

/* For `semad --check`: apply what DIR's journal holds to `db` (a copy of the database),
 * leaving the journal as it is; counts its records and mutations and gives the journal's
 * generation. Returns 0 or a SEMA_E* code with a message. */
int store_journal_apply(struct sqlite3 *db, const char *dir, uint64_t *records, uint64_t *ops,
                        uint64_t *gen, char *errbuf, size_t errlen);

#endif /* SEMAD_STORE_SQLITE_H */
