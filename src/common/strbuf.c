/* SPDX-License-Identifier: MIT */
/* strbuf.c - a growable byte string with a hard cap. */
#include "common/strbuf.h"

#include <stdlib.h>
#include <string.h>

#include "sema/error.h"

#define STRBUF_DEFAULT_LIMIT ((size_t)64 << 20)

void strbuf_init(struct strbuf *sb, size_t limit)
{
    sb->data = NULL;
    sb->len = 0;
    sb->cap = 0;
    sb->limit = limit != 0 ? limit : STRBUF_DEFAULT_LIMIT;
}

void strbuf_free(struct strbuf *sb)
{
    if (sb == NULL)
        return;
    free(sb->data);
    sb->data = NULL;
    sb->len = sb->cap = 0;
}

void strbuf_reset(struct strbuf *sb)
{
    sb->len = 0;
    if (sb->data != NULL)
        sb->data[0] = '\0';
}

static int reserve(struct strbuf *sb, size_t extra)
{
    size_t need = sb->len + extra + 1;
    size_t cap;
    char *p;

    if (extra > sb->limit || need > sb->limit + 1)
        return SEMA_ENOMEM;
    if (need <= sb->cap)
        return 0;
    cap = sb->cap != 0 ? sb->cap : 256;
    while (cap < need)
        cap *= 2;
    if (cap > sb->limit + 1)
        cap = sb->limit + 1;
    p = realloc(sb->data, cap);
    if (p == NULL)
        return SEMA_ENOMEM;
    sb->data = p;
    sb->cap = cap;
    return 0;
}

int strbuf_append(struct strbuf *sb, const void *data, size_t len)
{
    int rc = reserve(sb, len);

    if (rc != 0)
        return rc;
    if (len > 0)
        memcpy(sb->data + sb->len, data, len);
    sb->len += len;
    sb->data[sb->len] = '\0';
    return 0;
}

char *strbuf_steal(struct strbuf *sb, size_t *len)
{
    char *p = sb->data;

    if (len != NULL)
        *len = sb->len;
    sb->data = NULL;
    sb->len = sb->cap = 0;
    return p;
}
