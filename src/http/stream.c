/* SPDX-License-Identifier: MIT */
/* stream.c - the event-stream side of a connection. Each event is rendered once into a
 * frame that every stream sending it shares; a stream queues references, writes them without
 * copying, and is cut when it holds more than --max-stream-bytes or when all streams
 * together hold more than --max-stream-buffer-bytes (the slowest readers first). Memory goes
 * back to the system once the streams are gone. */
#include "http/server_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "common/jsonw.h"
#include "common/log.h"
#include "sema/error.h"

enum {
    WRITE_FRAMES = 4,             /* frames per write (libuv copies larger buffer arrays) */
    STREAM_SNDBUF = 64 << 10,     /* the kernel's send buffer of a stream (no autotuning) */
    CUT_LOG_MS = 10000,           /* at most one log line about cut streams this often */
    TRIM_MIN = 4 << 20,           /* give memory back when this much was freed */
    FRAME_HEAD = sizeof(sframe_t) /* bytes of a frame besides its text */
};

static void cut(conn_t *conn);
static void end_stream(conn_t *conn);

/* ---- frames ---- */

static sframe_t *frame_new(server_t *srv, size_t len)
{
    sframe_t *f = len <= UINT32_MAX ? malloc(sizeof *f + len) : NULL;
    if (f == NULL)
        return NULL;
    f->refs = 1;
    f->len = (uint32_t)len;
    srv->stream_mem += FRAME_HEAD + len;
    return f;
}

static void frame_unref(server_t *srv, sframe_t *f)
{
    if (f == NULL || --f->refs > 0)
        return;
    srv->stream_mem -= FRAME_HEAD + f->len;
    free(f);
}

int stream_format(struct strbuf *out, const char *id, const char *type, const char *data,
                  size_t len)
{
    jsonw_t w;

    jsonw_init(&w, out);
    jsonw_lit(&w, "id: ");
    jsonw_raw_str(&w, id);
    jsonw_lit(&w, "\nevent: ");
    jsonw_raw_str(&w, type);
    jsonw_lit(&w, "\ndata: ");
    jsonw_raw(&w, data, len);
    jsonw_lit(&w, "\n\n");
    return jsonw_end(&w);
}

/* The frame of an engine event: rendered once, for its first subscriber; the others (the
 * engine delivers an event to all its subscribers in turn) find it here. Borrowed. */
static sframe_t *event_frame(server_t *srv, const char *id, const char *type, const char *data,
                             size_t len)
{
    struct strbuf sb;
    sframe_t *f = NULL;

    if (srv->last_frame != NULL && strcmp(srv->last_id, id) == 0)
        return srv->last_frame;
    strbuf_init(&sb, 0);
    if (stream_format(&sb, id, type, data, len) == 0 && (f = frame_new(srv, sb.len)) != NULL) {
        memcpy(f->data, sb.data, sb.len);
        frame_unref(srv, srv->last_frame);
        srv->last_frame = f;
        snprintf(srv->last_id, sizeof srv->last_id, "%s", id);
    }
    strbuf_free(&sb);
    return f;
}

int conn_stream_event(conn_t *conn, const char *id, const char *type, const char *data, size_t len)
{
    sframe_t *f = event_frame(conn->srv, id, type, data, len);

    if (f == NULL) {
        cut(conn);
        return SEMA_ENOMEM;
    }
    return conn_stream_push(conn, f);
}

void server__streams_free(server_t *srv)
{
    frame_unref(srv, srv->last_frame);
    srv->last_frame = NULL;
}

/* ---- giving memory back ---- */

/* Freed stream memory goes back to the system once enough of it is free: the allocator
 * keeps it otherwise, and a burst of slow readers would leave semad large for good. */
static void maybe_trim(server_t *srv)
{
    if (srv->stream_mem > srv->stream_mem_mark)
        srv->stream_mem_mark = srv->stream_mem;
    if (srv->stream_mem_mark - srv->stream_mem < TRIM_MIN &&
        !(srv->nstreams == 0 && srv->stream_mem_mark > srv->stream_mem))
        return;
#ifdef __GLIBC__
    malloc_trim(0);
#endif
    srv->stream_mem_mark = srv->stream_mem;
}

/* ---- the queue ---- */

/* The i-th queued frame. */
static sframe_t *entry(const sstream_t *st, size_t i)
{
    const sblock_t *b = st->first;
    size_t k = st->first_i + i;

    while (k >= STREAM_BLOCK_SLOTS) {
        b = b->next;
        k -= STREAM_BLOCK_SLOTS;
    }
    return b->f[k];
}

static int append(server_t *srv, sstream_t *st, sframe_t *f)
{
    if (st->last == NULL || st->last_n == STREAM_BLOCK_SLOTS) {
        sblock_t *b = malloc(sizeof *b);
        if (b == NULL)
            return SEMA_ENOMEM;
        b->next = NULL;
        srv->stream_mem += sizeof *b;
        if (st->last != NULL) {
            st->last->next = b;
        } else {
            st->first = b;
            st->first_i = 0;
        }
        st->last = b;
        st->last_n = 0;
    }
    st->last->f[st->last_n++] = f;
    st->len++;
    st->held += f->len;
    return 0;
}

static void block_free(server_t *srv, sblock_t *b)
{
    srv->stream_mem -= sizeof *b;
    free(b);
}

/* Take the oldest entry off the queue (the caller drops its reference). */
static sframe_t *take_first(server_t *srv, sstream_t *st)
{
    sframe_t *f = st->first->f[st->first_i++];

    st->len--;
    st->held -= f->len;
    if (st->first_i == STREAM_BLOCK_SLOTS || st->len == 0) { /* an idle stream holds none */
        sblock_t *b = st->first;
        st->first = b->next;
        st->first_i = 0;
        if (st->first == NULL)
            st->last = NULL;
        block_free(srv, b);
    }
    return f;
}

static void on_stream_write(uv_write_t *w, int status);

static void unseal(conn_t *conn)
{
    sstream_t *st = conn->st;
    conn->srv->stream_mem -= st->sealed_len;
    free(st->sealed);
    st->sealed = NULL;
    st->sealed_len = 0;
}

/* Write the frames: as they are, or with TLS their records in one buffer the write owns
 * (the frames stay queued until it completes, so the stream's caps count them as before). */
static int write_frames(conn_t *conn, uv_buf_t *bufs, size_t n)
{
    sstream_t *st = conn->st;
    uv_buf_t sealed;
    if (conn->tls == NULL)
        return uv_write(&st->wr, (uv_stream_t *)&conn->tcp, bufs, (unsigned)n, on_stream_write);
    if (conn_seal(conn, bufs, n, &sealed) != 0)
        return -1;
    st->sealed = sealed.base;
    st->sealed_len = sealed.len;
    conn->srv->stream_mem += sealed.len; /* counted like the frames while it is written */
    int rc = uv_write(&st->wr, (uv_stream_t *)&conn->tcp, &sealed, 1, on_stream_write);
    if (rc != 0)
        unseal(conn);
    return rc;
}

/* Hand the oldest frames to libuv, unless a write runs. */
static void flush(conn_t *conn)
{
    sstream_t *st = conn->st;
    uv_buf_t bufs[WRITE_FRAMES];
    size_t n = st->len < WRITE_FRAMES ? st->len : WRITE_FRAMES;

    if (st->inflight > 0 || n == 0 || conn->closing)
        return;
    for (size_t i = 0; i < n; i++) {
        sframe_t *f = entry(st, i);
        bufs[i] = uv_buf_init(f->data, f->len);
    }
    st->inflight = n;
    if (write_frames(conn, bufs, n) != 0) {
        st->inflight = 0;
        cut(conn);
    }
}

/* Drop the `n` oldest frames. */
static void pop(conn_t *conn, size_t n)
{
    for (size_t i = 0; i < n; i++)
        frame_unref(conn->srv, take_first(conn->srv, conn->st));
}

static void on_stream_write(uv_write_t *w, int status)
{
    conn_t *conn = w->handle->data;
    sstream_t *st = conn->st;
    size_t n = st->inflight;

    st->inflight = 0;
    unseal(conn);
    pop(conn, n);
    if (conn->closing)
        return;
    if (status < 0) { /* the client left while it was written to: not one that does not read */
        end_stream(conn);
        return;
    }
    if (st->len > 0) {
        flush(conn);
    } else if (st->ending) {
        conn->stream = 0; /* from here the connection lingers like any other */
        conn_start_linger(conn);
    }
}

/* ---- cutting ---- */

static void log_cut(server_t *srv)
{
    uint64_t now = uv_now(srv->loop);

    srv->streams_cut++;
    srv->cut_unlogged++;
    if (srv->cut_logged_at != 0 && now - srv->cut_logged_at < CUT_LOG_MS)
        return;
    log_warn("cut %llu event stream(s) whose clients do not read (since the last such line); "
             "they resume with Last-Event-ID",
             (unsigned long long)srv->cut_unlogged);
    srv->cut_unlogged = 0;
    srv->cut_logged_at = now;
}

static void list_remove(server_t *srv, conn_t *conn);

/* Give back what the stream holds but the entries a running write has (they go when it
 * completes or is cancelled). Idempotent. */
static void stream_drop(conn_t *conn)
{
    sstream_t *st = conn->st;
    server_t *srv = conn->srv;
    sblock_t *keep = NULL, *b = st->first;
    size_t k = st->first_i, keep_n = 0;

    list_remove(srv, conn);
    for (size_t i = 0; i < st->len; i++, k++) {
        if (k == STREAM_BLOCK_SLOTS) {
            b = b->next;
            k = 0;
        }
        if (i < st->inflight) {
            keep = b;
            keep_n = k + 1;
        } else {
            st->held -= b->f[k]->len;
            frame_unref(srv, b->f[k]);
        }
    }
    st->len = st->inflight;
    b = keep != NULL ? keep->next : st->first;
    while (b != NULL) {
        sblock_t *next = b->next;
        block_free(srv, b);
        b = next;
    }
    if (keep != NULL) {
        keep->next = NULL;
        st->last = keep;
        st->last_n = (uint32_t)keep_n;
    } else {
        st->first = st->last = NULL;
        st->first_i = st->last_n = 0;
    }
}

static void on_cut(uv_timer_t *t)
{
    conn_close(t->data);
}

/* End a stream: its memory goes back now, the connection closes on the next loop turn (an
 * event delivery may be walking the subscribers). */
static void end_stream(conn_t *conn)
{
    if (conn->st->cut)
        return;
    conn->st->cut = 1;
    stream_drop(conn);
    uv_timer_start(&conn->timer, on_cut, 0, 0);
}

/* Cut a stream whose client does not read: counted and logged, then ended. */
static void cut(conn_t *conn)
{
    if (!conn->st->cut)
        log_cut(conn->srv);
    end_stream(conn);
}

/* All streams together hold too much: cut the slowest (most unsent bytes) until they do not. */
static void enforce_total(server_t *srv)
{
    while (srv->stream_mem > srv->cfg->max_stream_buffer_bytes) {
        conn_t *slowest = NULL;
        for (conn_t *c = srv->streams; c != NULL; c = c->st->next)
            if (slowest == NULL || c->st->held > slowest->st->held)
                slowest = c;
        if (slowest == NULL || slowest->st->held == 0)
            return;
        cut(slowest);
    }
}

int conn_stream_push(conn_t *conn, sframe_t *f)
{
    sstream_t *st = conn->st;
    server_t *srv = conn->srv;

    if (conn->closing || conn->lingering || st->ending || st->cut)
        return SEMA_EIO;
    if (st->held + f->len > srv->cfg->max_stream_bytes) {
        cut(conn);
        return SEMA_EIO;
    }
    if (append(srv, st, f) != 0) {
        cut(conn);
        return SEMA_EIO;
    }
    f->refs++;
    flush(conn);
    if (srv->stream_mem > srv->cfg->max_stream_buffer_bytes)
        enforce_total(srv);
    maybe_trim(srv);
    return st->cut ? SEMA_EIO : 0;
}

/* ---- the connection's side ---- */

static void list_add(server_t *srv, conn_t *conn)
{
    conn->st->prev = NULL;
    conn->st->next = srv->streams;
    if (srv->streams != NULL)
        srv->streams->st->prev = conn;
    srv->streams = conn;
    conn->st->listed = 1;
    srv->nstreams++;
}

static void list_remove(server_t *srv, conn_t *conn)
{
    if (!conn->st->listed)
        return;
    if (conn->st->prev != NULL)
        conn->st->prev->st->next = conn->st->next;
    else
        srv->streams = conn->st->next;
    if (conn->st->next != NULL)
        conn->st->next->st->prev = conn->st->prev;
    conn->st->listed = 0;
    srv->nstreams--;
}

int ctx_stream_begin(route_ctx_t *c, engine_sub_t *sub)
{
    conn_t *conn = c->conn;
    static const char head[] = "HTTP/1.1 200 OK\r\n"
                               "Content-Type: text/event-stream\r\n"
                               "Cache-Control: no-cache\r\n"
                               "Connection: close\r\n\r\n"
                               ": subscribed\n\n";
    assert(conn->busy && !conn->stream && !c->replied); /* the request becomes the stream */
    c->replied = 1;
    conn->sub = sub; /* from here, closing the connection ends the subscription */
    if ((conn->st = calloc(1, sizeof *conn->st)) == NULL) {
        conn_close(conn);
        return SEMA_ENOMEM;
    }
    c->srv->stream_conns++;
    server__count(c->srv, c->route, 200);
    conn->stream = 1;
    list_add(c->srv, conn);
    /* Cap what the kernel holds for a stream too, so --max-stream-bytes is what a client
     * that does not read can make semad's host keep for it. */
    int sndbuf = STREAM_SNDBUF;
    (void)uv_send_buffer_size((uv_handle_t *)&conn->tcp, &sndbuf);
    if (conn_stream_write(conn, head, sizeof head - 1) != 0)
        return SEMA_EIO;
    conn_arm_timer(conn);
    return 0;
}

int conn_stream_write(conn_t *conn, const char *data, size_t len)
{
    sframe_t *f = frame_new(conn->srv, len);
    int rc;

    if (f == NULL) {
        cut(conn);
        return SEMA_ENOMEM;
    }
    memcpy(f->data, data, len);
    rc = conn_stream_push(conn, f);
    frame_unref(conn->srv, f);
    return rc;
}

void conn_stream_end(conn_t *conn)
{
    if (conn->closing || conn->st->ending)
        return;
    conn->st->ending = 1; /* the subscription ends when the connection closes */
    conn->busy = 1;
    if (conn->st->len == 0) {
        conn->stream = 0;
        conn_start_linger(conn);
    }
}

void conn_stream_release(conn_t *conn)
{
    if (conn->st == NULL)
        return;
    stream_drop(conn);
    maybe_trim(conn->srv);
}

void conn_stream_free(conn_t *conn)
{
    server_t *srv = conn->srv;

    if (conn->st == NULL)
        return;
    stream_drop(conn); /* what a cancelled write left; inflight is 0 by now */
    free(conn->st);
    conn->st = NULL;
    if (--srv->stream_conns == 0) {
        /* Every stream is gone, connections included: give their memory back. */
#ifdef __GLIBC__
        malloc_trim(0);
#endif
        srv->stream_mem_mark = srv->stream_mem;
    }
}
