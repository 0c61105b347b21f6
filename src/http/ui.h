/* SPDX-License-Identifier: MIT */
/* ui.h - the dashboard's files, built into semad: embed_ui.cmake writes the table from the
 * files of src/http/ui when semad is built; ui.c serves them at /ui. */
#ifndef SEMAD_UI_H
#define SEMAD_UI_H

#include <stddef.h>

typedef struct {
    const char *name; /* the file's name in src/http/ui ("app.js"): its URL is /ui/NAME */
    const char *data; /* its bytes */
    size_t len;
    const char *etag; /* "\"<16 hex digits of its SHA-256>\"", quotes included */
} ui_file_t;

/* The files, by name. */
extern const ui_file_t ui__files[];
extern const size_t ui__nfiles;

#endif /* SEMAD_UI_H */
