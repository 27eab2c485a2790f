/* SPDX-License-Identifier: MIT */
/* Sends and receives on the server's socket under a command's deadline
 * (io.h): poll for the socket, at most wait_ms and never past end_ms,
 * then a call that does not block. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "io.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

uint64_t pkv__redis_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

pkv__redis_deadline pkv__redis_deadline_in(uint32_t whole_ms,
                                           uint32_t wait_ms)
{
    pkv__redis_deadline d = {pkv__redis_now_ms() + whole_ms, wait_ms};
    return d;
}

/* Wait until fd is ready for `events`, at most wait_ms and never past
 * the deadline: 1, or PKV__IO_TIMEOUT or PKV__IO_FAILED. A hang-up or an
 * error counts as ready: the call that follows says which it was. */
static int wait_for(int fd, short events, const pkv__redis_deadline *d,
                    uint64_t wait_ms)
{
    for (;;) {
        uint64_t now = pkv__redis_now_ms();
        if (now >= d->end_ms)
            return PKV__IO_TIMEOUT;
        uint64_t left = d->end_ms - now;
        struct pollfd p = {fd, events, 0};
        int ready = poll(&p, 1, (int)(left < wait_ms ? left : wait_ms));
        if (ready > 0)
            return 1;
        if (ready == 0)
            return PKV__IO_TIMEOUT;
        if (errno != EINTR)
            return PKV__IO_FAILED;
    }
}

/* A failed call's errno as what it means here. */
static int failure(int error)
{
    return error == EPIPE || error == ECONNRESET || error == ENOTCONN ||
                   error == ESHUTDOWN
               ? PKV__IO_CLOSED
           : error == ETIMEDOUT ? PKV__IO_TIMEOUT
                                : PKV__IO_FAILED;
}

int pkv__redis_send(int fd, const void *data, size_t n,
                    const pkv__redis_deadline *d)
{
    const char *at = data;
    while (n > 0) {
        /* Only the deadline: the kernel reports room to write once half
         * of what is queued has gone, so a server that reads steadily
         * but slowly could go longer than wait_ms between two reports. */
        int ready = wait_for(fd, POLLOUT, d, UINT64_MAX);
        if (ready < 0)
            return ready;
        ssize_t sent = send(fd, at, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
                continue;
            return failure(errno);
        }
        at += sent;
        n -= (size_t)sent;
    }
    return 0;
}

ssize_t pkv__redis_receive(int fd, void *to, size_t n,
                           const pkv__redis_deadline *d)
{
    for (;;) {
        int ready = wait_for(fd, POLLIN, d, d->wait_ms);
        if (ready < 0)
            return ready;
        ssize_t got = recv(fd, to, n, MSG_DONTWAIT);
        if (got >= 0)
            return got;
        if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
            return failure(errno);
    }
}
