/* SPDX-License-Identifier: MIT */
/* ipcap.c - open connections counted by client address (ipcap.h), in the engine's hash
 * table. */
#include "http/ipcap.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "sema/error.h"

enum { KEY_MAX = 9 /* family byte + 8 address bytes */ };

struct ipcap_entry {
    enode_t node;
    uint64_t n; /* open connections */
    uint8_t len;
    uint8_t key[KEY_MAX];
};

int ipcap_init(ipcap_t *c)
{
    if (uv_random(NULL, NULL, &c->seed, sizeof c->seed, 0, NULL) != 0)
        c->seed = (uint64_t)(uintptr_t)c ^ uv_hrtime();
    return etab_init(&c->tab, 64);
}

static void free_entry(void *arg, enode_t *n)
{
    (void)arg;
    free(n);
}

void ipcap_destroy(ipcap_t *c)
{
    if (c->tab.slots != NULL)
        etab_each(&c->tab, free_entry, NULL);
    etab_destroy(&c->tab);
}

/* The counting key of an address: 4 bytes for IPv4 (also mapped), the /64 for IPv6. */
static size_t addr_key(const struct sockaddr *sa, uint8_t key[KEY_MAX])
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (sa->sa_family == AF_INET6) {
        const uint8_t *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        if (memcmp(a, mapped, sizeof mapped) != 0) {
            key[0] = 6;
            memcpy(key + 1, a, 8);
            return 9;
        }
        key[0] = 4;
        memcpy(key + 1, a + 12, 4);
        return 5;
    }
    key[0] = 4;
    memcpy(key + 1, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    return 5;
}

static int entry_eq(const enode_t *n, const void *key, size_t len)
{
    const ipcap_entry_t *e = (const ipcap_entry_t *)n;
    return e->len == len && memcmp(e->key, key, len) == 0;
}

int ipcap_enter(ipcap_t *c, const struct sockaddr *addr, uint64_t max, ipcap_entry_t **out)
{
    uint8_t key[KEY_MAX];
    *out = NULL;
    if (max == 0)
        return 0;
    size_t len = addr_key(addr, key);
    uint64_t h = etab_hash(key, len, c->seed);
    ipcap_entry_t *e = (ipcap_entry_t *)etab_find(&c->tab, h, entry_eq, key, len);
    if (e == NULL) {
        if ((e = calloc(1, sizeof *e)) == NULL)
            return SEMA_ENOMEM;
        e->node.hash = h;
        e->len = (uint8_t)len;
        memcpy(e->key, key, len);
        etab_insert(&c->tab, &e->node);
    }
    if (e->n >= max)
        return SEMA_EBUSY;
    e->n++;
    *out = e;
    return 0;
}

void ipcap_leave(ipcap_t *c, ipcap_entry_t *e)
{
    if (e == NULL || --e->n > 0)
        return;
    etab_remove(&c->tab, &e->node);
    free(e);
}
