/* SPDX-License-Identifier: MIT */
/* store_journal.c - the embedded store's journal file (see store_journal.h).
 *
 * Layout: a header at offset 0 (magic, version, generation, checksum), then records from
 * JNL_START on, each a 32-byte head (magic, body length, generation, sequence number,
 * mutation count, CRC-32C of head and body) and its body. A record counts only if its
 * generation is the header's and its sequence number follows the one before, so what a
 * crash tore, and whatever an earlier generation left further on, ends the replay. The
 * file is preallocated and zero-filled once, and reused: writing into blocks that exist
 * makes a commit's fdatasync flush data only. Integers are in the machine's byte order:
 * the journal is read back only by the semad that wrote it, on the same machine. */
#include "store/store_journal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sema/error.h"
#include "store/store.h"

#define JNL_MAGIC "SEMAJNL" /* 8 bytes with its NUL */
#define JNL_VERSION 1u
#define JNL_REC_MAGIC 0x4a524d53u /* "SMRJ" */
#define JNL_START 4096u           /* the first record's offset */
#define JNL_SIZE (1u << 20)       /* preallocated: about 10,000 mutations between checkpoints */

struct jnl {
    int fd;
    char *path;
    uint64_t gen;  /* the header's generation */
    uint64_t seq;  /* the last record's sequence number (0: none since the reset) */
    uint64_t off;  /* where the next record goes */
    uint64_t size; /* the file's size */
    int broken;    /* a reset failed half-way: no append until one succeeds */
};

typedef struct {
    char magic[8];
    uint32_t version;
    uint32_t crc;
    uint64_t gen;
} jnl_header_t;

typedef struct {
    uint32_t magic;
    uint32_t len; /* body bytes */
    uint64_t gen;
    uint64_t seq;
    uint32_t nops;
    uint32_t crc; /* of the head with crc = 0, then the body */
} jnl_head_t;

_Static_assert(sizeof(jnl_head_t) == JNL_RECORD_HEAD, "a record head is 32 bytes");

/* ---- CRC-32C (Castagnoli): the CPU's instruction where it has one, else a table ---- */

static uint32_t crc_table[256];
static int crc_hw;
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0x82F63B78u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const unsigned char *p,
                                                            size_t len)
{
    uint64_t c = crc;

    for (; len >= 8; p += 8, len -= 8) {
        uint64_t w;
        memcpy(&w, p, sizeof w);
        c = __builtin_ia32_crc32di(c, w);
    }
    crc = (uint32_t)c;
    while (len-- > 0)
        crc = __builtin_ia32_crc32qi(crc, *p++);
    return crc;
}
#endif

static uint32_t crc32_add(uint32_t crc, const void *data, size_t len)
{
    const unsigned char *p = data;

    crc = ~crc;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (crc_hw)
        return ~crc_sse42(crc, p, len);
#endif
    while (len-- > 0)
        crc = crc_table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

static uint32_t header_crc(const jnl_header_t *h)
{
    jnl_header_t c = *h;

    c.crc = 0;
    return crc32_add(0, &c, sizeof c);
}

static uint32_t record_crc(const jnl_head_t *head, const unsigned char *body)
{
    jnl_head_t c = *head;

    c.crc = 0;
    return crc32_add(crc32_add(0, &c, sizeof c), body, head->len);
}

/* ---- file helpers ---- */

static int msg_errno(char *errbuf, size_t errlen, const char *path, const char *doing, int err)
{
    if (errbuf != NULL && errlen > 0)
        snprintf(errbuf, errlen, "%s: %s: %s", path, doing, strerror(err));
    return err == EACCES || err == EPERM ? SEMA_EACCES : err == ENOMEM ? SEMA_ENOMEM : SEMA_EIO;
}

static int inject_errno, inject_after; /* store_inject_journal_errno */

void store_inject_journal_errno(int err, int after)
{
    inject_errno = err;
    inject_after = after;
}

static int write_all(int fd, const void *buf, size_t len, uint64_t off)
{
    const char *p = buf;

    if (inject_errno != 0 && inject_after-- <= 0)
        return inject_errno;
    while (len > 0) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? errno : EIO;
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

static int sync_fd(int fd)
{
    while (fdatasync(fd) != 0) {
        if (errno != EINTR)
            return errno;
    }
    return 0;
}

/* Sync DIR so a file just created in it survives a crash. */
static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int err = 0;

    if (fd < 0)
        return errno;
    if (fsync(fd) != 0)
        err = errno;
    close(fd);
    return err;
}

static char *journal_path(const char *dir)
{
    size_t n = strlen(dir) + sizeof("/" STORE_JOURNAL_NAME);
    char *p = malloc(n);

    if (p != NULL)
        snprintf(p, n, "%s/%s", dir, STORE_JOURNAL_NAME);
    return p;
}

/* A generation no record in the file can carry: for a file without a valid header. */
static uint64_t fresh_gen(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) | 1u;
}

/* Start generation `gen`: the first record's place zeroed and the header written, then
 * synced, so no record of an earlier generation can be taken for one of this one. */
static int write_header(jnl_t *j, uint64_t gen)
{
    static const unsigned char zero[JNL_RECORD_HEAD];
    jnl_header_t h;
    int err;

    j->broken = 1;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, JNL_MAGIC, sizeof h.magic);
    h.version = JNL_VERSION;
    h.gen = gen;
    h.crc = header_crc(&h);
    err = write_all(j->fd, zero, sizeof zero, JNL_START);
    if (err == 0)
        err = write_all(j->fd, &h, sizeof h, 0);
    if (err == 0)
        err = sync_fd(j->fd);
    if (err == 0) {
        j->gen = gen;
        j->seq = 0;
        j->off = JNL_START;
        j->broken = 0;
    }
    return err;
}

/* Fill the file with zeros up to JNL_SIZE and sync it (a new or short file). */
static int preallocate(jnl_t *j)
{
    static const unsigned char zeros[65536];
    uint64_t at = j->size;
    int err = 0;

    while (err == 0 && at < JNL_SIZE) {
        size_t n = JNL_SIZE - at < sizeof zeros ? (size_t)(JNL_SIZE - at) : sizeof zeros;
        err = write_all(j->fd, zeros, n, at);
        at += n;
    }
    if (err == 0)
        err = sync_fd(j->fd);
    if (err == 0)
        j->size = at;
    return err;
}

/* Read the header's generation: 0 for a new file or one whose header is not valid (a
 * reset that never completed leaves nothing a replay would need: see jnl_reset). */
static uint64_t read_gen(int fd)
{
    jnl_header_t h;

    if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h)
        return 0;
    if (memcmp(h.magic, JNL_MAGIC, sizeof h.magic) != 0 || h.version != JNL_VERSION ||
        h.crc != header_crc(&h))
        return 0;
    return h.gen;
}

int jnl_open(jnl_t **out, const char *dir, char *errbuf, size_t errlen)
{
    jnl_t *j = calloc(1, sizeof *j);
    struct stat sb;
    int existed, err = 0;

    pthread_once(&crc_once, crc_init);
    *out = NULL;
    if (j == NULL || (j->path = journal_path(dir)) == NULL) {
        free(j);
        return SEMA_ENOMEM;
    }
    existed = access(j->path, F_OK) == 0;
    j->fd = open(j->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (j->fd < 0) {
        int rc = msg_errno(errbuf, errlen, j->path, "cannot open the journal", errno);
        free(j->path);
        free(j);
        return rc;
    }
    if (fstat(j->fd, &sb) != 0)
        err = errno;
    j->size = err == 0 ? (uint64_t)sb.st_size : 0;
    if (err == 0 && j->size < JNL_SIZE)
        err = preallocate(j);
    if (err == 0 && !existed)
        err = sync_dir(dir);
    if (err != 0) {
        int rc = msg_errno(errbuf, errlen, j->path, "cannot prepare the journal", err);
        jnl_close(j);
        return rc;
    }
    j->gen = read_gen(j->fd);
    j->off = JNL_START;
    *out = j;
    return 0;
}

/* Read the whole file (it is small: the preallocated size, unless a long failure of
 * checkpoints let it grow). */
static unsigned char *read_file(int fd, uint64_t *len)
{
    struct stat sb;
    unsigned char *buf;
    uint64_t got = 0;

    if (fstat(fd, &sb) != 0 || sb.st_size < 0)
        return NULL;
    *len = (uint64_t)sb.st_size;
    buf = malloc(*len > 0 ? *len : 1);
    while (buf != NULL && got < *len) {
        ssize_t n = pread(fd, buf + got, *len - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            *len = got; /* shorter than it said: what is there */
            break;
        }
        got += (uint64_t)n;
    }
    return buf;
}

/* Walk the valid records of `gen` in buf: fn for each (if not NULL). Sets *end and *seq
 * after the last one. */
static int walk(const unsigned char *buf, uint64_t len, uint64_t gen, jnl_record_fn fn, void *arg,
                uint64_t *end, uint64_t *seq, uint64_t *nrec, uint64_t *nops)
{
    uint64_t off = JNL_START;
    int rc = 0;

    *seq = 0;
    while (gen != 0 && off + JNL_RECORD_HEAD <= len) {
        jnl_head_t h;
        memcpy(&h, buf + off, sizeof h);
        if (h.magic != JNL_REC_MAGIC || h.gen != gen || h.seq != *seq + 1 ||
            h.len > len - off - JNL_RECORD_HEAD ||
            h.crc != record_crc(&h, buf + off + JNL_RECORD_HEAD))
            break;
        if (fn != NULL && (rc = fn(arg, buf + off + JNL_RECORD_HEAD, h.len, h.nops)) != 0)
            break;
        *seq = h.seq;
        *nrec += 1;
        *nops += h.nops;
        off += JNL_RECORD_HEAD + h.len;
    }
    *end = off;
    return rc;
}

int jnl_replay(jnl_t *j, jnl_record_fn fn, void *arg, char *errbuf, size_t errlen)
{
    uint64_t len = 0, end, seq, nrec = 0, nops = 0;
    unsigned char *buf = read_file(j->fd, &len);
    int rc;

    if (buf == NULL)
        return msg_errno(errbuf, errlen, j->path, "cannot read the journal",
                         errno ? errno : ENOMEM);
    rc = walk(buf, len, j->gen, fn, arg, &end, &seq, &nrec, &nops);
    free(buf);
    if (rc == 0) {
        j->off = end;
        j->seq = seq;
    }
    return rc;
}

int jnl_append(jnl_t *j, unsigned char *buf, size_t len, uint32_t nops, int sync)
{
    jnl_head_t h;
    int err;

    if (len < JNL_RECORD_HEAD || len - JNL_RECORD_HEAD > UINT32_MAX)
        return EINVAL;
    if ((j->gen == 0 || j->broken) && (err = jnl_reset(j)) != 0) /* no valid header yet */
        return err;
    h.magic = JNL_REC_MAGIC;
    h.len = (uint32_t)(len - JNL_RECORD_HEAD);
    h.gen = j->gen;
    h.seq = j->seq + 1;
    h.nops = nops;
    h.crc = record_crc(&h, buf + JNL_RECORD_HEAD);
    memcpy(buf, &h, sizeof h);
    err = write_all(j->fd, buf, len, j->off);
    if (err == 0 && sync)
        err = sync_fd(j->fd);
    if (err != 0) {
        /* Not acknowledged: make sure no later replay takes it (best effort; the next
         * record is written over it anyway). */
        static const unsigned char zero[JNL_RECORD_HEAD];
        (void)write_all(j->fd, zero, sizeof zero, j->off);
        return err;
    }
    j->seq = h.seq;
    j->off += len;
    if (j->off > j->size)
        j->size = j->off;
    return 0;
}

int jnl_reset(jnl_t *j)
{
    return write_header(j, j->gen != 0 ? j->gen + 1 : fresh_gen());
}

uint64_t jnl_used(const jnl_t *j)
{
    return j->off - JNL_START;
}

int jnl_full(const jnl_t *j)
{
    return j->off >= JNL_SIZE - JNL_SIZE / 8;
}

void jnl_close(jnl_t *j)
{
    if (j == NULL)
        return;
    if (j->fd >= 0)
        close(j->fd);
    free(j->path);
    free(j);
}

int jnl_scan(const char *dir, jnl_record_fn fn, void *arg, uint64_t *records, uint64_t *ops,
             uint64_t *gen, char *errbuf, size_t errlen)
{
    char *path = journal_path(dir);
    uint64_t len = 0, end, seq;
    unsigned char *buf;
    int fd;

    pthread_once(&crc_once, crc_init);
    *records = *ops = 0;
    if (path == NULL)
        return SEMA_ENOMEM;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        int rc = err == ENOENT ? 0 : msg_errno(errbuf, errlen, path, "cannot open", err);
        free(path);
        return rc;
    }
    buf = read_file(fd, &len);
    if (buf == NULL) {
        int rc = msg_errno(errbuf, errlen, path, "cannot read", errno ? errno : ENOMEM);
        close(fd);
        free(path);
        return rc;
    }
    uint64_t g = read_gen(fd);
    int rc = walk(buf, len, g, fn, arg, &end, &seq, records, ops);

    if (gen != NULL)
        *gen = g;
    free(buf);
    close(fd);
    free(path);
    return rc;
}
