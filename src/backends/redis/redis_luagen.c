/* SPDX-License-Identifier: MIT */
/* redis_luagen.c - writes the constants of sema.lua from redis_proto.h and be_msg.h: run when semad
 * is built (CMakeLists.txt), its output takes the place of the line "-- @PROTO@" in the
 * library that semad loads into Redis. A build-time tool, not part of semad. */
#include <stdio.h>

#include "backends/redis/redis_proto.h"

/* A name in lower case (a static buffer: used before the next call). */
static const char *lower(const char *s)
{
    static char b[64];
    size_t i = 0;

    for (; s[i] != '\0' && i + 1 < sizeof b; i++)
        b[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] - 'A' + 'a' : s[i]);
    b[i] = '\0';
    return b;
}

/* "{A = 1, B = 2}": a Lua table from names and numbers, one per line when long. */
static void table_begin(const char *name)
{
    printf("local %s = {\n", name);
}

static void table_end(void)
{
    printf("}\n");
}

/* redis_luagen FILE: writes the constants to FILE. */
int main(int argc, char **argv)
{
    if (argc != 2 || freopen(argv[1], "w", stdout) == NULL) {
        fprintf(stderr, "usage: redis_luagen FILE (the Lua constants are written to FILE)\n");
        return 2;
    }
    puts("-- Generated from src/backends/redis/redis_proto.h and src/backends/be_msg.h by "
         "redis_luagen: do not edit.");
    /* limits and protocol numbers */
    table_begin("P");
    /* (each integer also as a string, NAME_S: a number passed to redis.call is formatted
     * with %.17g on every call) */
#define INT_ROW(name, value)                                                                       \
    printf("  %s = %lld, %s_S = '%lld',\n", #name, (long long)(value), #name, (long long)(value));
    RS_INT_MAP(INT_ROW)
#undef INT_ROW
#define DBL_ROW(name, value) printf("  %s = %.17g,\n", #name, (double)(value));
    RS_DOUBLE_MAP(DBL_ROW)
#undef DBL_ROW
    table_end();
    /* the row: ROW's names in order, their struct format and each one's byte offset */
    printf("local ROW = {");
#define ROW_NAME(id) printf("'%s', ", lower(#id));
    RS_ROW_MAP(ROW_NAME)
#undef ROW_NAME
    printf("}\nlocal ROW_FMT = '<");
    for (int i = 0; i < RS_ROW_LEN; i++)
        putchar('d');
    printf("'\nlocal ROW_AT = {");
#define ROW_AT(id) printf("%s = '%d', ", lower(#id), RS_ROW_##id * 8);
    RS_ROW_MAP(ROW_AT)
#undef ROW_AT
    printf("}\n");
    /* acts */
    table_begin("ACT");
#define ACT_ROW(id, num, type) printf("  %s = %d, %s_S = '%d',\n", #id, num, #id, num);
    RS_ACT_MAP(ACT_ROW)
#undef ACT_ROW
    table_end();
    /* status codes: SEMA_E* without SEMA_E (E.NOENT) */
    table_begin("E");
#define ERR_ROW(name, num, msg) printf("  %s = %d,\n", &#name[1], num);
    SEMA_ERRNO_MAP(ERR_ROW)
#undef ERR_ROW
    table_end();
    /* message ids, and the status each answers with */
    table_begin("MSG");
#define MSG_ROW(id, code, text) printf("  %s = %d,\n", #id, BE_MSG_##id);
    BE_MSG_MAP(MSG_ROW)
#undef MSG_ROW
    table_end();
    table_begin("MSG_CODE");
#define CODE_ROW(id, code, text) printf("  [%d] = %d,\n", BE_MSG_##id, SEMA_##code);
    BE_MSG_MAP(CODE_ROW)
#undef CODE_ROW
    table_end();
    return ferror(stdout) || fclose(stdout) != 0 ? 1 : 0;
}
