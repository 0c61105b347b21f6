/* SPDX-License-Identifier: MIT */
/* store_sqlite.h - constants of the embedded store's file format, shared by the store and
 * its offline checker; never included outside src/store. */
#ifndef SEMAD_STORE_SQLITE_H
#define SEMAD_STORE_SQLITE_H

/* Bump STORE_FORMAT when the schema changes; an older semad then refuses the file
 * (SEMA_EVERSION) instead of misreading it, and this one upgrades an older file in place
 * when it opens it (store_sqlite.c, migrate()). Format 2 added leases.principal, 3 the tickets
 * table. */
#define STORE_APP_ID 0x53454D41 /* "SEMA", the database header's application_id */
#define STORE_FORMAT 3
#define STORE_FORMAT_OLDEST                                                                        \
    1 /* still opened: upgraded in place (2 adds leases' tokens, 3 tickets) */
#define STORE_DB_NAME "sema.db"
#define STORE_LOCK_NAME "LOCK"

#include <stddef.h>
#include <stdint.h>

struct sqlite3;

/* For `semad --check`: apply what DIR's journal holds to `db` (a copy of the database),
 * leaving the journal as it is; counts its records and mutations and gives the journal's
 * generation. Returns 0 or a SEMA_E* code with a message. */
int store_journal_apply(struct sqlite3 *db, const char *dir, uint64_t *records, uint64_t *ops,
                        uint64_t *gen, char *errbuf, size_t errlen);

#endif /* SEMAD_STORE_SQLITE_H */
