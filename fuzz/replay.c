/* SPDX-License-Identifier: MIT */
/* replay.c - a standalone main for the fuzz targets: runs every file of the given corpus
 * directories (or the given files) through LLVMFuzzerTestOneInput, so a plain gcc build
 * replays the corpus as ordinary tests. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

enum { REPLAY_MAX_BYTES = 1 << 20 }; /* a corpus file larger than this is an error */

/* Read the whole file at `path` into a new buffer of exactly its size (so the sanitizers
 * see any read past the end). Returns 0 or -1 (after a message). */
static int read_file(const char *path, uint8_t **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    uint8_t *buf = malloc(REPLAY_MAX_BYTES);
    size_t n = buf != NULL ? fread(buf, 1, REPLAY_MAX_BYTES, f) : 0;
    int bad = buf == NULL || ferror(f) || !feof(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "replay: %s: unreadable or larger than %d bytes\n", path, REPLAY_MAX_BYTES);
        free(buf);
        return -1;
    }
    *out = malloc(n > 0 ? n : 1);
    if (*out == NULL) {
        free(buf);
        return -1;
    }
    memcpy(*out, buf, n);
    free(buf);
    *len = n;
    return 0;
}

static int run_file(const char *path)
{
    uint8_t *data;
    size_t len;
    if (read_file(path, &data, &len) != 0)
        return -1;
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput(data, len);
    free(data);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int skip_entry(const struct dirent *e)
{
    return e->d_name[0] != '.';
}

/* Every regular file of `dir`, in name order. Returns the number run, or -1. */
static int run_dir(const char *dir)
{
    struct dirent **names;
    int n = scandir(dir, &names, skip_entry, by_name), ran = 0, rc = 0;
    if (n < 0) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        int w = snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (w > 0 && (size_t)w < sizeof path && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (run_file(path) != 0)
                rc = -1;
            ran++;
        }
        free(names[i]);
    }
    free(names);
    return rc != 0 ? -1 : ran;
}

int main(int argc, char **argv)
{
    int total = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        struct stat st;
        int n = stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode) ? run_dir(argv[i])
                                                               : (run_file(argv[i]) == 0 ? 1 : -1);
        if (n < 0)
            return 1;
        total += n;
    }
    if (total == 0) {
        fprintf(stderr, "replay: no input found (an empty corpus tests nothing)\n");
        return 1;
    }
    printf("replay: %d inputs ok\n", total);
    return 0;
}
