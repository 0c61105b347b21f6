/* SPDX-License-Identifier: MIT */
/* ui.c - the dashboard at /ui: its files, built into semad (ui.h), each with a strict
 * Content-Security-Policy and an ETag; and its settings (/ui/config.json). Everything it
 * shows it reads from the v1 API with the visitor's token: these routes give no data. */
#include "http/ui.h"

#include <stdio.h>
#include <string.h>

#include "common/jsonw.h"
#include "http/server_internal.h"
#include "sema/error.h"
#include "sema/version.h"

/* The headers of every /ui reply: no script, style, image or connection but semad's own
 * (nothing inline: the files hold every script and style), in no frame, never sniffed into
 * another type, no Referer leaving the page, a window of its own. */
#define UI_HEADERS                                                                                 \
    "Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; "           \
    "img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; "                    \
    "frame-ancestors 'none'\r\n"                                                                   \
    "X-Content-Type-Options: nosniff\r\n"                                                          \
    "X-Frame-Options: DENY\r\n"                                                                    \
    "Referrer-Policy: no-referrer\r\n"                                                             \
    "Cross-Origin-Opener-Policy: same-origin\r\n"                                                  \
    "Cross-Origin-Resource-Policy: same-origin\r\n"

/* The dashboard is off (--no-ui): its routes answer as if semad had none. */
static int ui_off(route_ctx_t *c)
{
    const char *url = c->req->url.data;
    size_t plen = strcspn(url, "?");
    if (!c->srv->cfg->no_ui)
        return 0;
    ctx__reply_no_route(c, ROUTER_NOT_FOUND, "GET", url, plen);
    return 1;
}

static const char *content_type(const char *name)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".html", "text/html; charset=utf-8"}, {".js", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},   {".svg", "image/svg+xml"},
        {".json", "application/json"},         {".png", "image/png"},
    };
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot != NULL && i < sizeof types / sizeof types[0]; i++)
        if (strcmp(dot, types[i].ext) == 0)
            return types[i].type;
    return "application/octet-stream";
}

static const ui_file_t *find_file(const char *name)
{
    for (size_t i = 0; i < ui__nfiles; i++)
        if (strcmp(ui__files[i].name, name) == 0)
            return &ui__files[i];
    return NULL;
}

/* If-None-Match names the file's ETag (weak comparison, RFC 9110 §13.1.2) or is "*". */
static int not_modified(const route_ctx_t *c, const ui_file_t *f)
{
    const char *inm = http_if_none_match(c->req);
    if (inm == NULL)
        return 0;
    while (*inm == ' ' || *inm == '\t')
        inm++;
    return strcmp(inm, "*") == 0 || strstr(inm, f->etag) != NULL;
}

/* A file, or 304 when the browser has it: revalidated on every use (no-cache), so a new
 * semad's page is never mixed with an old one's scripts. */
static void send_file(route_ctx_t *c, const ui_file_t *f)
{
    char extra[sizeof UI_HEADERS + 96];
    snprintf(extra, sizeof extra, "%sCache-Control: no-cache\r\nETag: %s\r\n", UI_HEADERS, f->etag);
    if (not_modified(c, f))
        ctx__reply_hdr(c, 304, NULL, NULL, 0, extra);
    else
        ctx__reply_hdr(c, 200, content_type(f->name), f->data, f->len, extra);
}

/* The file `name`, or the 404 of a path semad does not serve. */
static void serve(route_ctx_t *c, const char *name)
{
    const ui_file_t *f = find_file(name);
    const char *url = c->req->url.data;
    if (ui_off(c))
        return;
    if (f != NULL)
        send_file(c, f);
    else
        ctx__reply_no_route(c, ROUTER_NOT_FOUND, "GET", url, strcspn(url, "?"));
}

/* GET /ui: the page (its files, and the API it reads, are named relative to it, so it also
 * works behind a proxy that serves semad under a path of its own) */
void ui_index(route_ctx_t *c)
{
    serve(c, "index.html");
}

/* GET /ui/{file} */
void ui_file(route_ctx_t *c)
{
    serve(c, c->param);
}

/* "token": the request's token, as far as the page needs it (its name, rights and prefixes:
 * it shows the actions only to an admin), or null. */
static void token_member(jsonw_t *w, const auth_token_t *tk)
{
    static const unsigned rights[] = {AUTH_READ, AUTH_ACQUIRE, AUTH_ADMIN};
    jsonw_key(w, "token");
    if (tk == NULL) {
        jsonw_null(w);
        return;
    }
    jsonw_obj(w);
    jsonw_key(w, "name");
    jsonw_cstr(w, tk->name);
    jsonw_key(w, "rights");
    jsonw_arr(w);
    for (size_t i = 0; i < sizeof rights / sizeof rights[0]; i++)
        if (auth_has(tk, rights[i]))
            jsonw_cstr(w, auth_right_name(rights[i]));
    jsonw_arr_end(w);
    jsonw_key(w, "prefixes");
    jsonw_arr(w);
    for (size_t i = 0; i < tk->nprefixes; i++)
        if (jsonw_utf8_valid(tk->prefixes[i], tk->prefix_len[i]))
            jsonw_str(w, tk->prefixes[i], tk->prefix_len[i]);
    jsonw_arr_end(w);
    jsonw_obj_end(w);
}

/* GET /ui/config.json: what the page cannot learn from the API: whether it may act
 * (--ui-read-only), whether requests need a token (--auth) and whose token it holds, how
 * often an idle event stream hears from semad, semad's clock (ages are shown in it) and
 * version. */
void ui_config(route_ctx_t *c)
{
    const server_config_t *cfg = c->srv->cfg;
    struct strbuf out;
    jsonw_t w;
    uv_timeval64_t now;
    if (ui_off(c))
        return;
    uv_gettimeofday(&now);
    strbuf_init(&out, 0);
    jsonw_init(&w, &out);
    jsonw_obj(&w);
    jsonw_key(&w, "read_only");
    jsonw_bool(&w, cfg->ui_read_only);
    jsonw_key(&w, "auth");
    jsonw_bool(&w, cfg->auth_file != NULL);
    token_member(&w, ctx__token_peek(c));
    jsonw_key(&w, "sse_heartbeat_ms");
    jsonw_int(&w, cfg->sse_heartbeat_ms);
    jsonw_key(&w, "now");
    jsonw_int(&w, now.tv_sec * 1000 + now.tv_usec / 1000);
    jsonw_key(&w, "version");
    jsonw_cstr(&w, SEMA_VERSION_STRING);
    jsonw_obj_end(&w);
    jsonw_raw(&w, "\n", 1);
    if (jsonw_end(&w) != 0)
        ctx_reply_err(c, SEMA_ENOMEM, NULL);
    else
        ctx__reply_hdr(c, 200, "application/json; charset=utf-8", out.data, out.len,
                       UI_HEADERS "Cache-Control: no-store\r\n");
    strbuf_free(&out);
}
