/* SPDX-License-Identifier: MIT */
/* notify.c - systemd's readiness protocol, the sending side (see notify.h). The protocol is
 * a datagram to a Unix socket, so it needs no library: a path, or a name in the abstract
 * namespace when it starts with '@'. */
#include "http/notify.h"

#include "common/log.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int notify_send(const char *state)
{
    static int warned;
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa;
    size_t n;
    int fd, rc = 0;

    if (path == NULL || path[0] == '\0')
        return 0;
    n = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || n >= sizeof sa.sun_path) {
        if (!warned++)
            log_warn("NOTIFY_SOCKET=%s: not a Unix socket path; the service manager is not told "
                     "when semad is ready",
                     path);
        return -1;
    }
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, n);
    if (path[0] == '@')
        sa.sun_path[0] = '\0'; /* the abstract namespace */
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
                         (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)) < 0)
        rc = -1;
    if (rc != 0 && !warned++)
        log_warn("NOTIFY_SOCKET=%s: cannot send to it: %s", path, strerror(errno));
    if (fd >= 0)
        close(fd);
    return rc == 0 ? 1 : -1;
}

uint64_t notify_watchdog_usec(void)
{
    const char *usec = getenv("WATCHDOG_USEC");
    const char *pid = getenv("WATCHDOG_PID");
    char *end;
    unsigned long long v;

    if (usec == NULL || usec[0] == '\0')
        return 0;
    if (pid != NULL && pid[0] != '\0' && strtoll(pid, NULL, 10) != (long long)getpid())
        return 0; /* meant for another process */
    errno = 0;
    v = strtoull(usec, &end, 10);
    if (errno != 0 || *end != '\0')
        return 0;
    return (uint64_t)v;
}
