/* SPDX-License-Identifier: MIT */
/* fuzz_path.c - request targets without a server: the first byte picks the method (and
 * whether '+' means a space), the rest is the raw target that the router matches and the
 * percent-decoder takes apart, as semad's dispatch does. */
#include <stdlib.h>
#include <string.h>

#include "common/jsonw.h"
#include "fuzz.h"
#include "http/http.h"
#include "route_check.h"

static const char *const methods[] = {"GET",  "POST",    "PUT",   "PATCH", "DELETE",
                                      "HEAD", "OPTIONS", "POSTX", "G",     "TRACE"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const char *method = methods[data[0] % (sizeof methods / sizeof methods[0])];
    int plus_space = data[0] >> 7;
    size_t len = size - 1;
    char *url = malloc(len + 1); /* NUL-terminated, as llhttp's URL in the request is */
    if (url == NULL)
        return 0;
    memcpy(url, data + 1, len);
    url[len] = '\0';
    fuzz_route_check(method, url);
    fuzz_pct_check(url, len, plus_space); /* the whole target, NULs and all */
    (void)jsonw_utf8_valid(url, len);
    free(url);
    return 0;
}
