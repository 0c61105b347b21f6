/* SPDX-License-Identifier: MIT */
/* be_msg.c - the back ends' messages by id: their texts and status codes (be_msg.h). */
#include "backends/be_msg.h"

#include <stddef.h>

static const struct {
    int code;
    const char *text;
} msgs[BE_MSG_COUNT] = {[BE_MSG_NONE] = {0, NULL},
#define BE_MSG__ROW(id, code, text) [BE_MSG_##id] = {SEMA_##code, text},
                        BE_MSG_MAP(BE_MSG__ROW)
#undef BE_MSG__ROW
};

const char *be_msg_text(int id)
{
    return id > 0 && id < BE_MSG_COUNT ? msgs[id].text : NULL;
}

int be_msg_code(int id)
{
    if (id == BE_MSG_NONE)
        return 0;
    return id > 0 && id < BE_MSG_COUNT ? msgs[id].code : SEMA_EIO;
}
