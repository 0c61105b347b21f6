/* SPDX-License-Identifier: MIT */
/* ipcap.h - open connections counted by client address, for --max-connections-per-ip. An
 * IPv4 address counts alone; an IPv6 address by its /64 prefix (what one host is usually
 * given, so it cannot take a fresh address per connection); an IPv4-mapped IPv6 address
 * as IPv4. Entries exist only while they count a connection: at most --max-connections. */
#ifndef SEMAD_IPCAP_H
#define SEMAD_IPCAP_H

#include <stdint.h>
#include <sys/socket.h>

#include "common/table.h"

typedef struct ipcap_entry ipcap_entry_t;

typedef struct {
    etab_t tab;
    uint64_t seed; /* of the hash, random: addresses cannot be picked to collide */
} ipcap_t;

/* Start empty. 0 or SEMA_ENOMEM. */
int ipcap_init(ipcap_t *c);
/* Free every entry. */
void ipcap_destroy(ipcap_t *c);
/* Count a connection from `addr`: *out is its entry (hand it to ipcap_leave). Returns 0,
 * SEMA_EBUSY when the address already has `max` connections (0: no cap; nothing is
 * counted then and *out is NULL), or SEMA_ENOMEM. */
int ipcap_enter(ipcap_t *c, const struct sockaddr *addr, uint64_t max, ipcap_entry_t **out);
/* The connection counted by `e` closed. NULL is fine. */
void ipcap_leave(ipcap_t *c, ipcap_entry_t *e);

#endif /* SEMAD_IPCAP_H */
