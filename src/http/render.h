/* SPDX-License-Identifier: MIT */
/* render.h - the one renderer: the engine's typed results and events, and problem details,
 * in the wire format of docs/http-api.md (and docs/openapi.yaml), through the one output
 * writer (jsonw.h). Every function appends to `out` and returns 0, SEMA_ENOMEM (the
 * strbuf's cap) or SEMA_EINVAL (a string that is not UTF-8). */
#ifndef SEMAD_RENDER_H
#define SEMAD_RENDER_H

#include "common/strbuf.h"
#include "engine/engine.h"

/* The body of a successful request's reply; nothing for ENGINE_RES_NONE. */
int render_result(struct strbuf *out, const engine_result_t *res);

/* A lease alone (the acquire's hot path). */
int render_lease(struct strbuf *out, const engine_lease_t *l);

/* A ticket result (ENGINE_RES_TICKET) alone: the body of its replies and its stream's
 * events. 0 or SEMA_ENOMEM. */
int render_ticket(struct strbuf *out, const engine_result_t *res);

/* The data of an event: {"name", ...} as its type has it; `reason` for "reset". */
int render_event_data(struct strbuf *out, const engine_event_t *ev, const char *reason);

/* An RFC 9457 problem: {"type":"urn:sema:problem:<code>","title","status","code"[,
 * "detail"]}. */
int render_problem(struct strbuf *out, int status, const char *code, const char *title,
                   const char *detail);

#endif /* SEMAD_RENDER_H */
