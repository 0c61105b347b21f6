/* SPDX-License-Identifier: MIT */
/* redis_slots.h - Redis Cluster's key slots, slot map and redirects, as pure functions: the
 * slot of a key (CRC16/XMODEM of its hash tag, as Redis's keyHashSlot computes it), the map of
 * which primary serves each slot (from CLUSTER SHARDS, or CLUSTER SLOTS on an older Redis),
 * and the MOVED and ASK errors that say a slot is served elsewhere. No I/O, no allocation
 * beyond the map the caller owns. */
#ifndef SEMAD_REDIS_SLOTS_H
#define SEMAD_REDIS_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#define RS_SLOTS 16384        /* slots in a Redis Cluster */
#define RS_SLOT_NODES_MAX 500 /* primaries one map can name (Redis's own advice: 1,000 nodes) */
#define RS_SLOT_NONE 0xffff   /* rs_slotmap_t.owner of a slot no primary serves */
#define RS_HOST_MAX 256       /* a node's host (an address or a name), with its NUL */

/* CRC16/XMODEM (polynomial 0x1021, initial value 0) of n bytes: the checksum Redis Cluster
 * hashes keys with ("123456789" gives 0x31c3). */
uint16_t rs__slot_crc16(const char *p, size_t n);

/* The slot of a key: CRC16 of the whole key modulo 16384, or of its hash tag when it has one
 * (the bytes between its first '{' and the first '}' after it, when there is at least one). */
unsigned rs__slot_of(const char *key, size_t n);

/* ---- one tag per slot, and ids that name their slot ---- */

/* On Redis Cluster every semaphore of a slot shares one hash tag, eight hex digits like a tag
 * on one Redis ("sema:{0a1b2c3d}..."), so what is per slot (its due index, epoch, instance
 * records, lease and ticket ids) has keys in that slot too: tag[slot] is the smallest number
 * whose "%08x" falls in slot. */
typedef struct {
    uint32_t tag[RS_SLOTS];
} rs_slot_tags_t;

/* Fill t (about 170,000 checksums of eight bytes, once). */
void rs__slot_tags_make(rs_slot_tags_t *t);

/* A lease or ticket id made on Redis Cluster names its semaphore's slot in its first three
 * characters (base64url, the slot's 14 bits: the first is 'A' to 'D', a letter as an id's first
 * character must be), so any instance finds its keys in one call. id has at least three
 * characters; they are overwritten. */
void rs__slot_id_put(char *id, unsigned slot);

/* The slot an id names, or -1 when its first three characters name none. */
int rs__slot_id_get(const char *id, size_t n);

/* A node's address. */
typedef struct {
    char host[RS_HOST_MAX];
    int port;
} rs_slot_addr_t;

#define RS_SLOT_SEEDS_MAX 16 /* nodes in one address list */

/* Parse a list of nodes, "HOST[:PORT][,HOST[:PORT]...]" (an IPv6 host in brackets when it has
 * a port; a bare one is a host alone), into out (at most RS_SLOT_SEEDS_MAX); a node without a
 * port gets default_port. Returns how many, or -1 when one is malformed or there are too many. */
int rs__slot_addrs(const char *s, size_t n, int default_port, rs_slot_addr_t *out);

/* A redirect from a node: MOVED (the slot is served by another primary now: update the map)
 * or ASK (the slot is migrating and this key is already at the target: send ASKING, then the
 * command, there, once, and leave the map alone). */
enum { RS_REDIR_NONE, RS_REDIR_MOVED, RS_REDIR_ASK };
typedef struct {
    int kind; /* RS_REDIR_* */
    unsigned slot;
    rs_slot_addr_t to;
} rs_redirect_t;

/* Parse an error reply's text ("MOVED 3999 127.0.0.1:6381", "ASK 3999 [::1]:6381", or
 * "MOVED 3999 :6381" where an empty host means the node that answered: `from_host`) into
 * *out. Returns its kind: RS_REDIR_NONE for any other error, or a malformed redirect. */
int rs__slot_redirect(const char *err, size_t n, const char *from_host, rs_redirect_t *out);

/* Which primary serves each slot. The caller owns it (about 180 KB: allocate it). */
typedef struct {
    uint16_t owner[RS_SLOTS]; /* an index into nodes, or RS_SLOT_NONE */
    rs_slot_addr_t nodes[RS_SLOT_NODES_MAX];
    int nnodes;
    unsigned covered; /* slots with an owner */
} rs_slotmap_t;

/* Empty the map: no slot served, no node. */
void rs__slotmap_clear(rs_slotmap_t *m);

/* The index of the node at host:port, added when new. -1 when the map is full or the host
 * too long. */
int rs__slotmap_node(rs_slotmap_t *m, const char *host, int port);

/* Fill the map from a reply to CLUSTER SHARDS (Redis 7) asked of the node at `from_host`: each
 * shard's slot ranges go to its primary (its node with role "master"; its "endpoint", or its
 * "ip" when the endpoint is unknown). Returns 0, or -1 when the reply does not have that shape
 * (the map is then left empty). A shard without a primary (it failed and no replica took
 * over yet) leaves its slots without an owner. */
int rs__slotmap_from_shards(rs_slotmap_t *m, const redisReply *rep, const char *from_host);

/* The same from a reply to CLUSTER SLOTS (each entry: first slot, last slot, primary, its
 * replicas; an empty host is `from_host`). */
int rs__slotmap_from_slots(rs_slotmap_t *m, const redisReply *rep, const char *from_host);

/* A MOVED redirect: the slot is served by `to` now. Returns the node's index, or -1 when the
 * map is full (refresh it whole then). */
int rs__slotmap_moved(rs_slotmap_t *m, const rs_redirect_t *mv);

/* The node that serves slot, or NULL. */
const rs_slot_addr_t *rs__slotmap_owner(const rs_slotmap_t *m, unsigned slot);

#endif /* SEMAD_REDIS_SLOTS_H */
