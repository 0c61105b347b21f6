/* SPDX-License-Identifier: MIT */
/* test_redis_slots.c - Redis Cluster's key slots, hash tags, redirects and slot map, as pure
 * code (redis_slots.c); the slots of many keys against a real node's CLUSTER KEYSLOT are in
 * test_redis_cluster.c. Replies are made from RESP text by hiredis's own reader. */
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "backends/redis/redis_slots.h"
#include "test.h"

/* A reply parsed from RESP text, as hiredis parses what Redis sends. */
static redisReply *resp(const char *text)
{
    redisReader *rd = redisReaderCreate();
    void *rep = NULL;

    ASSERT_NOT_NULL(rd);
    ASSERT_EQ(redisReaderFeed(rd, text, strlen(text)), REDIS_OK);
    ASSERT_EQ(redisReaderGetReply(rd, &rep), REDIS_OK);
    ASSERT_NOT_NULL(rep);
    redisReaderFree(rd);
    return rep;
}

static unsigned slot(const char *key)
{
    return rs__slot_of(key, strlen(key));
}

TEST(crc16_is_xmodem)
{
    /* the check value of CRC-16/XMODEM, which the Redis Cluster specification also gives */
    ASSERT_EQ(rs__slot_crc16("123456789", 9), 0x31c3);
    ASSERT_EQ(rs__slot_crc16("", 0), 0);
    ASSERT_EQ(rs__slot_crc16("A", 1), 0x58e5);
}

TEST(slots_of_keys_redis_documents)
{
    /* CLUSTER KEYSLOT's own examples, and keys checked against redis-server 7.0 */
    ASSERT_EQ(slot("somekey"), 11058);
    ASSERT_EQ(slot("foo{hash_tag}"), 2515);
    ASSERT_EQ(slot("foo"), 12182);
    ASSERT_EQ(slot("{a}x"), 15495);
    ASSERT_EQ(slot(""), 0);
}

TEST(hash_tags_follow_keyhashslot)
{
    /* the bytes between the first '{' and the first '}' after it */
    ASSERT_EQ(slot("{user1000}.following"), slot("user1000"));
    ASSERT_EQ(slot("{user1000}.followers"), slot("{user1000}.following"));
    ASSERT_EQ(slot("foo{bar}{zap}"), slot("bar"));
    ASSERT_EQ(slot("foo{{bar}}zap"), slot("{bar"));
    ASSERT_EQ(slot("a{b}c{d}"), slot("b"));
    /* an empty tag or no closing brace: the whole key */
    ASSERT_EQ(slot("foo{}{bar}"), rs__slot_crc16("foo{}{bar}", 10) % RS_SLOTS);
    ASSERT_EQ(slot("foo{bar"), rs__slot_crc16("foo{bar", 7) % RS_SLOTS);
    ASSERT_EQ(slot("}foo{"), rs__slot_crc16("}foo{", 5) % RS_SLOTS);
    /* the stems of sema's keys: every key of one semaphore in one slot */
    ASSERT_EQ(slot("sema:{0badcafe}s:jobs:m"), slot("sema:{0badcafe}s:jobs:q"));
    ASSERT_EQ(slot("sema:{0badcafe}s:jobs:m"), slot("0badcafe"));
    /* binary keys: a NUL is a byte like any other */
    ASSERT_EQ(rs__slot_of("{a\0b}x", 6), rs__slot_crc16("a\0b", 3) % RS_SLOTS);
}

TEST(node_lists_are_parsed)
{
    rs_slot_addr_t a[RS_SLOT_SEEDS_MAX];
    const char *l = "10.0.0.1:7000,redis-b,[::1]:7001,[fe80::2],fe80::3";
    char many[512] = "h";

    ASSERT_EQ(rs__slot_addrs(l, strlen(l), 6379, a), 5);
    ASSERT_STREQ(a[0].host, "10.0.0.1");
    ASSERT_EQ(a[0].port, 7000);
    ASSERT_STREQ(a[1].host, "redis-b");
    ASSERT_EQ(a[1].port, 6379);
    ASSERT_STREQ(a[2].host, "::1");
    ASSERT_EQ(a[2].port, 7001);
    ASSERT_STREQ(a[3].host, "fe80::2");
    ASSERT_EQ(a[3].port, 6379);
    ASSERT_STREQ(a[4].host, "fe80::3");
    ASSERT_EQ(a[4].port, 6379);
    static const char *const bad[] = {"",        ",",   "a,",   ",a",     "a,,b",    "a:",   "a:0",
                                      "a:65536", "a:x", "[::1", "[::1]:", "[]:7000", ":7000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (rs__slot_addrs(bad[i], strlen(bad[i]), 6379, a) != -1)
            TEST_FAIL_("accepted: \"%s\"", bad[i]);
    for (int i = 1; i < RS_SLOT_SEEDS_MAX; i++)
        memcpy(many + 2 * i - 1, ",h", 3);
    ASSERT_EQ(rs__slot_addrs(many, strlen(many), 1, a), RS_SLOT_SEEDS_MAX);
    memcpy(many + strlen(many), ",h", 3);
    ASSERT_EQ(rs__slot_addrs(many, strlen(many), 1, a), -1);
}

TEST(redirects_are_parsed)
{
    rs_redirect_t r;
    const char *e;

    e = "MOVED 3999 127.0.0.1:6381";
    ASSERT_EQ(rs__slot_redirect(e, strlen(e), "10.0.0.1", &r), RS_REDIR_MOVED);
    ASSERT_EQ(r.slot, 3999);
    ASSERT_STREQ(r.to.host, "127.0.0.1");
    ASSERT_EQ(r.to.port, 6381);
    e = "ASK 0 [::1]:7000";
    ASSERT_EQ(rs__slot_redirect(e, strlen(e), NULL, &r), RS_REDIR_ASK);
    ASSERT_EQ(r.slot, 0);
    ASSERT_STREQ(r.to.host, "::1");
    ASSERT_EQ(r.to.port, 7000);
    e = "ASK 16383 fe80::1:7000"; /* a bare IPv6 host: the last colon splits */
    ASSERT_EQ(rs__slot_redirect(e, strlen(e), NULL, &r), RS_REDIR_ASK);
    ASSERT_STREQ(r.to.host, "fe80::1");
    e = "MOVED 12 :6380"; /* an unknown endpoint: the node that answered */
    ASSERT_EQ(rs__slot_redirect(e, strlen(e), "redis-a.internal", &r), RS_REDIR_MOVED);
    ASSERT_STREQ(r.to.host, "redis-a.internal");
    ASSERT_EQ(r.to.port, 6380);
    e = "MOVED 5 node-7.example:7001";
    ASSERT_EQ(rs__slot_redirect(e, strlen(e), NULL, &r), RS_REDIR_MOVED);
    ASSERT_STREQ(r.to.host, "node-7.example");
}

TEST(other_errors_and_malformed_redirects_are_not_redirects)
{
    static const char *const bad[] = {
        "ERR unknown command",
        "CLUSTERDOWN The cluster is down",
        "TRYAGAIN Multiple keys",
        "MOVED",
        "MOVED 3999",
        "MOVED 3999 ",
        "MOVED 16384 127.0.0.1:7000",
        "MOVED -1 127.0.0.1:7000",
        "MOVED 12x 127.0.0.1:7000",
        "MOVED 3999 127.0.0.1",
        "MOVED 3999 127.0.0.1:0",
        "MOVED 3999 127.0.0.1:65536",
        "MOVED 3999 127.0.0.1:80x",
        "ASK 3999 :7000", /* an empty host with nobody to stand for it */
        "MOVED 123456 127.0.0.1:7000",
        "moved 1 127.0.0.1:7000",
    };
    rs_redirect_t r;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (rs__slot_redirect(bad[i], strlen(bad[i]), NULL, &r) != RS_REDIR_NONE)
            TEST_FAIL_("taken for a redirect: \"%s\"", bad[i]);
}

/* CLUSTER SHARDS of three primaries (one of them with two ranges) as Redis 7.0 sends it */
static const char SHARDS[] =
    "*3\r\n"
    "*4\r\n$5\r\nslots\r\n*4\r\n:0\r\n:5460\r\n:16000\r\n:16383\r\n$5\r\nnodes\r\n*2\r\n"
    "*14\r\n$2\r\nid\r\n$2\r\naa\r\n$4\r\nport\r\n:7000\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n"
    "$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
    "$18\r\nreplication-offset\r\n:56\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
    "*14\r\n$2\r\nid\r\n$2\r\nab\r\n$4\r\nport\r\n:7003\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n"
    "$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$7\r\nreplica\r\n"
    "$18\r\nreplication-offset\r\n:56\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
    /* a replica listed first, then its primary, whose endpoint is unknown: its ip is used */
    "*4\r\n$5\r\nslots\r\n*2\r\n:5461\r\n:10922\r\n$5\r\nnodes\r\n*2\r\n"
    "*10\r\n$2\r\nid\r\n$2\r\nbb\r\n$4\r\nport\r\n:7004\r\n$2\r\nip\r\n$8\r\n10.0.0.2\r\n"
    "$8\r\nendpoint\r\n$8\r\n10.0.0.2\r\n$4\r\nrole\r\n$7\r\nreplica\r\n"
    "*10\r\n$2\r\nid\r\n$2\r\nba\r\n$4\r\nport\r\n:7001\r\n$2\r\nip\r\n$8\r\n10.0.0.1\r\n"
    "$8\r\nendpoint\r\n$1\r\n?\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
    /* a shard whose primary failed and has no successor yet: its slots have no owner */
    "*4\r\n$5\r\nslots\r\n*2\r\n:10923\r\n:15999\r\n$5\r\nnodes\r\n*1\r\n"
    "*10\r\n$2\r\nid\r\n$2\r\ncb\r\n$4\r\nport\r\n:7005\r\n$2\r\nip\r\n$8\r\n10.0.0.3\r\n"
    "$8\r\nendpoint\r\n$8\r\n10.0.0.3\r\n$4\r\nrole\r\n$7\r\nreplica\r\n";

TEST(slot_map_from_cluster_shards)
{
    rs_slotmap_t *m = malloc(sizeof *m);
    redisReply *rep = resp(SHARDS);
    const rs_slot_addr_t *a;

    ASSERT_OK(rs__slotmap_from_shards(m, rep, "127.0.0.1"));
    ASSERT_EQ(m->nnodes, 2);
    ASSERT_EQ(m->covered, 5461 + 384 + 5462);
    a = rs__slotmap_owner(m, 0);
    ASSERT_STREQ(a->host, "127.0.0.1");
    ASSERT_EQ(a->port, 7000);
    ASSERT_EQ(rs__slotmap_owner(m, 16383)->port, 7000);
    a = rs__slotmap_owner(m, 10922);
    ASSERT_STREQ(a->host, "10.0.0.1");
    ASSERT_EQ(a->port, 7001);
    ASSERT_NULL(rs__slotmap_owner(m, 10923));
    ASSERT_NULL(rs__slotmap_owner(m, 15999));
    ASSERT_NULL(rs__slotmap_owner(m, RS_SLOTS));
    freeReplyObject(rep);
    free(m);
}

TEST(slot_map_from_cluster_slots)
{
    /* [first, last, [host, port, id], replica...]; an empty host is the node asked */
    static const char SLOTS_REPLY[] =
        "*2\r\n"
        "*4\r\n:0\r\n:8191\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\naa\r\n"
        "*3\r\n$9\r\n127.0.0.1\r\n:7003\r\n$2\r\nab\r\n"
        "*3\r\n:8192\r\n:16383\r\n*3\r\n$0\r\n\r\n:7001\r\n$2\r\nba\r\n";
    rs_slotmap_t *m = malloc(sizeof *m);
    redisReply *rep = resp(SLOTS_REPLY);

    ASSERT_OK(rs__slotmap_from_slots(m, rep, "seed.example"));
    ASSERT_EQ(m->covered, RS_SLOTS);
    ASSERT_EQ(rs__slotmap_owner(m, 8191)->port, 7000);
    ASSERT_STREQ(rs__slotmap_owner(m, 8192)->host, "seed.example");
    ASSERT_EQ(rs__slotmap_owner(m, 8192)->port, 7001);
    freeReplyObject(rep);
    free(m);
}

TEST(malformed_maps_are_refused_and_leave_the_map_empty)
{
    static const char *const bad[] = {
        "+OK\r\n",
        "*1\r\n*2\r\n$5\r\nslots\r\n*2\r\n:0\r\n:1\r\n",                      /* no nodes */
        "*1\r\n*4\r\n$5\r\nslots\r\n*1\r\n:0\r\n$5\r\nnodes\r\n*0\r\n",       /* half a range */
        "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:9\r\n:3\r\n$5\r\nnodes\r\n*0\r\n", /* backwards */
        "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16384\r\n$5\r\nnodes\r\n*0\r\n",
        "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:1\r\n$5\r\nnodes\r\n*1\r\n" /* no port */
        "*4\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$2\r\nip\r\n$1\r\nx\r\n",
    };
    rs_slotmap_t *m = malloc(sizeof *m);

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        redisReply *rep = resp(bad[i]);
        if (rs__slotmap_from_shards(m, rep, "h") != -1 || m->covered != 0 || m->nnodes != 0)
            TEST_FAIL_("accepted as CLUSTER SHARDS: case %zu", i);
        freeReplyObject(rep);
    }
    {
        redisReply *rep = resp("*1\r\n*3\r\n:5\r\n:1\r\n*2\r\n$1\r\nh\r\n:1\r\n");
        ASSERT_EQ(rs__slotmap_from_slots(m, rep, "h"), -1);
        ASSERT_EQ(m->covered, 0);
        freeReplyObject(rep);
    }
    free(m);
}

TEST(moved_updates_one_slot_and_adds_the_node)
{
    rs_slotmap_t *m = malloc(sizeof *m);
    redisReply *rep = resp(SHARDS);
    rs_redirect_t mv;
    const char *e = "MOVED 100 127.0.0.1:7002";

    ASSERT_OK(rs__slotmap_from_shards(m, rep, "127.0.0.1"));
    ASSERT_EQ(rs__slot_redirect(e, strlen(e), NULL, &mv), RS_REDIR_MOVED);
    ASSERT_EQ(rs__slotmap_moved(m, &mv), 2);
    ASSERT_EQ(rs__slotmap_owner(m, 100)->port, 7002);
    ASSERT_EQ(rs__slotmap_owner(m, 99)->port, 7000);
    ASSERT_EQ(rs__slotmap_owner(m, 101)->port, 7000);
    /* a slot that had no owner gets one */
    e = "MOVED 12000 10.0.0.1:7001";
    ASSERT_EQ(rs__slot_redirect(e, strlen(e), NULL, &mv), RS_REDIR_MOVED);
    ASSERT_EQ(rs__slotmap_moved(m, &mv), 1);
    ASSERT_EQ(m->covered, 5461 + 384 + 5462 + 1);
    freeReplyObject(rep);
    free(m);
}

TEST(a_full_map_refuses_more_nodes)
{
    rs_slotmap_t *m = malloc(sizeof *m);
    rs_redirect_t mv = {RS_REDIR_MOVED, 7, {"10.9.9.9", 1}};
    char host[32];

    rs__slotmap_clear(m);
    for (int i = 0; i < RS_SLOT_NODES_MAX; i++) {
        snprintf(host, sizeof host, "10.0.%d.%d", i / 250, i % 250);
        ASSERT_EQ(rs__slotmap_node(m, host, 7000), i);
    }
    ASSERT_EQ(rs__slotmap_node(m, "10.0.0.0", 7000), 0); /* known: found, not added */
    ASSERT_EQ(rs__slotmap_moved(m, &mv), -1);
    ASSERT_NULL(rs__slotmap_owner(m, 7));
    ASSERT_EQ(rs__slotmap_node(m, "", 7000), -1);
    ASSERT_EQ(rs__slotmap_node(m, "h", 0), -1);
    free(m);
}

TEST(every_slot_has_a_tag_that_falls_in_it)
{
    rs_slot_tags_t *t = malloc(sizeof *t);
    char key[32];

    ASSERT_NOT_NULL(t);
    rs__slot_tags_make(t);
    for (unsigned s = 0; s < RS_SLOTS; s++) {
        ASSERT_NE(t->tag[s], UINT32_MAX);
        snprintf(key, sizeof key, "sema:{%08x}s:any", (unsigned)t->tag[s]);
        ASSERT_EQ(slot(key), s);
    }
    /* the smallest: 00000000 is its own slot's tag */
    ASSERT_EQ(t->tag[slot("{00000000}")], 0u);
    free(t);
}

TEST(ids_name_their_slot)
{
    char id[] = "xxxxrestofarandomid01234";

    for (unsigned s = 0; s < RS_SLOTS; s++) {
        rs__slot_id_put(id, s);
        ASSERT_GE(id[0], 'A');
        ASSERT_LE(id[0], 'D');
        ASSERT_EQ(rs__slot_id_get(id, strlen(id)), (int)s);
    }
    ASSERT_EQ(rs__slot_id_get("AB", 2), -1);      /* too short */
    ASSERT_EQ(rs__slot_id_get("EAAxyz", 6), -1);  /* past the last slot */
    ASSERT_EQ(rs__slot_id_get("A.Axyz", 6), -1);  /* not base64url */
    ASSERT_EQ(rs__slot_id_get("A\0Axyz", 6), -1); /* a NUL is no digit */
    ASSERT_EQ(rs__slot_id_get("D__xyz", 6), 16383);
}
