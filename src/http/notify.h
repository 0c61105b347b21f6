/* SPDX-License-Identifier: MIT */
/* notify.h - tell a service manager where semad stands, in systemd's readiness protocol
 * (sd_notify(3)): one datagram of NAME=VALUE lines to the Unix socket named by
 * $NOTIFY_SOCKET. semad sends READY=1 once it serves, RELOADING=1 and READY=1 around a
 * SIGHUP, STOPPING=1 when it starts to stop, and WATCHDOG=1 keep-alives when the service
 * asks for them (WatchdogSec=). Without $NOTIFY_SOCKET every call does nothing, so the
 * same binary runs under systemd (Type=notify), under another supervisor, or by hand. */
#ifndef SEMAD_NOTIFY_H
#define SEMAD_NOTIFY_H

#include <stdint.h>

/* Send `state` (e.g. "READY=1\nSTATUS=serving"): 1 sent, 0 no $NOTIFY_SOCKET, -1 failed
 * (logged once). */
int notify_send(const char *state);

/* The keep-alive interval the service manager asks for, in microseconds, or 0: from
 * $WATCHDOG_USEC, when $WATCHDOG_PID is unset or names this process. */
uint64_t notify_watchdog_usec(void);

#endif /* SEMAD_NOTIFY_H */
