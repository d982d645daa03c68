/*
 * sockpair.h: a connected loopback TCP pair made with Winsock, for the
 * Windows programs that watch sockets (iocp_test, io_test). Call
 * sockpair_start once (WSAStartup) before the first pair.
 */
#ifndef TERN_WIN_SOCKPAIR_H
#define TERN_WIN_SOCKPAIR_H

#include <stdbool.h>
#include <winsock2.h>
#include <ws2tcpip.h>

static bool sockpair_start(void)
{
    WSADATA wsa;
    return WSAStartup(MAKEWORD(2, 2), &wsa) == 0;
}

/* sockpair: *a connected to *b over 127.0.0.1; false (nothing left open) on failure. */
static bool sockpair(SOCKET *a, SOCKET *b)
{
    *a = *b = INVALID_SOCKET;
    SOCKET l = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
    if (l == INVALID_SOCKET)
        return false;
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int len = sizeof(sa);
    bool ok = bind(l, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
              getsockname(l, (struct sockaddr *)&sa, &len) == 0 && listen(l, 1) == 0;
    if (ok) {
        *a = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
        ok = *a != INVALID_SOCKET && connect(*a, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    }
    if (ok) {
        *b = accept(l, NULL, NULL);
        ok = *b != INVALID_SOCKET;
    }
    closesocket(l);
    if (!ok) {
        if (*a != INVALID_SOCKET)
            closesocket(*a);
        *a = *b = INVALID_SOCKET;
    }
    return ok;
}

/* sockpair_reset: close s with a reset (SO_LINGER 0) rather than a FIN. */
static inline void sockpair_reset(SOCKET s)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(s, SOL_SOCKET, SO_LINGER, (const char *)&lg, sizeof(lg));
    closesocket(s);
}

#endif /* TERN_WIN_SOCKPAIR_H */
