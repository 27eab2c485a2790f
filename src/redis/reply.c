/* SPDX-License-Identifier: MIT */
/* Replies to MGET and SET, read straight from the socket (reply.h). */
#define _POSIX_C_SOURCE 200809L
#include "reply.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

enum { LINE_MAX = 512 };

/* The reply is read through the caller's buffer (PKV__REPLY_BUFFER bytes):
 * one recv takes whatever the socket holds, many values' worth, where
 * hiredis takes 16 KiB; a payload larger than the buffer goes straight to
 * its slot. */
typedef struct reader {
    int fd;
    size_t pos, len;
    uint8_t *buf;
    uint64_t deadline_ms; /* CLOCK_MONOTONIC: the whole reply by then */
} reader;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* recv once bytes arrive before the reply's deadline, retrying on EINTR;
 * 0 on EOF, -1 on error or past the deadline. The socket's own timeout
 * bounds one recv; the deadline bounds them all, so a server that sends
 * a byte now and then cannot hold the connector. */
static ssize_t receive(const reader *r, void *to, size_t n)
{
    for (;;) {
        uint64_t now = now_ms();
        if (now >= r->deadline_ms)
            return -1;
        struct pollfd p = {r->fd, POLLIN, 0};
        int ready = poll(&p, 1, (int)(r->deadline_ms - now));
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0)
            return -1;
        ssize_t got = recv(r->fd, to, n, 0);
        if (got >= 0 || errno != EINTR)
            return got;
    }
}

/* More bytes into the buffer (it is empty). 0, or -1. */
static int fill(reader *r)
{
    ssize_t got = receive(r, r->buf, PKV__REPLY_BUFFER);
    if (got <= 0)
        return -1;
    r->pos = 0;
    r->len = (size_t)got;
    return 0;
}

/* The next line, without its CRLF, NUL-terminated, into line (LINE_MAX).
 * 0, or -1 (too long, or the connection failed). */
static int read_line(reader *r, char *line)
{
    size_t n = 0;
    for (;;) {
        if (r->pos == r->len && fill(r) != 0)
            return -1;
        char c = (char)r->buf[r->pos++];
        if (c == '\n' && n > 0 && line[n - 1] == '\r') {
            line[n - 1] = '\0';
            return 0;
        }
        if (n + 1 >= LINE_MAX)
            return -1;
        line[n++] = c;
    }
}

/* n bytes into `to` (NULL: dropped). 0, or -1. */
static int read_bytes(reader *r, uint8_t *to, size_t n)
{
    while (n > 0) {
        if (r->pos < r->len) {
            size_t take = r->len - r->pos < n ? r->len - r->pos : n;
            if (to != NULL) {
                memcpy(to, r->buf + r->pos, take);
                to += take;
            }
            r->pos += take;
            n -= take;
        } else if (to != NULL && n >= PKV__REPLY_BUFFER) {
            /* A large payload: straight into its slot. */
            ssize_t got = receive(r, to, n);
            if (got <= 0)
                return -1;
            to += got;
            n -= (size_t)got;
        } else if (fill(r) != 0) {
            return -1;
        }
    }
    return 0;
}

/* A decimal after the type byte of line; -2 for none or out of range. */
static long long number(const char *line)
{
    const char *p = line + 1;
    int negative = *p == '-';
    if (negative)
        p++;
    if (*p < '0' || *p > '9')
        return -2;
    long long v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (1ll << 40))
            return -2;
        v = v * 10 + (*p - '0');
    }
    return *p != '\0' ? -2 : negative ? -v : v;
}

enum pkv__reply_result pkv__redis_read_status(int fd, uint8_t *buffer,
                                              uint32_t timeout_ms,
                                              char *error,
                                              size_t error_size)
{
    reader r = {fd, 0, 0, buffer, now_ms() + timeout_ms};
    char line[LINE_MAX];
    if (read_line(&r, line) != 0)
        return PKV__REPLY_BROKEN;
    enum pkv__reply_result got = strcmp(line, "+OK") == 0 ? PKV__REPLY_VALUES
                                 : line[0] == '-'        ? PKV__REPLY_ERROR
                                                         : PKV__REPLY_BROKEN;
    if (got == PKV__REPLY_ERROR && error != NULL && error_size > 0) {
        size_t n = strlen(line + 1);
        n = n < error_size - 1 ? n : error_size - 1;
        memcpy(error, line + 1, n);
        error[n] = '\0';
    }
    /* One command in flight: nothing may follow its reply. */
    return r.pos == r.len ? got : PKV__REPLY_BROKEN;
}

enum pkv__reply_result pkv__redis_read_mget(int fd, uint8_t *buffer,
                                            uint32_t n, uint8_t *staging,
                                            size_t value_size,
                                            uint64_t *sizes,
                                            uint32_t timeout_ms)
{
    reader r = {fd, 0, 0, buffer, now_ms() + timeout_ms};
    char line[LINE_MAX];
    if (read_line(&r, line) != 0)
        return PKV__REPLY_BROKEN;
    if (line[0] == '-')
        return PKV__REPLY_ERROR;
    if (line[0] != '*' || number(line) != (long long)n)
        return PKV__REPLY_BROKEN;
    for (uint32_t i = 0; i < n; i++) {
        if (read_line(&r, line) != 0 || line[0] != '$')
            return PKV__REPLY_BROKEN;
        long long len = number(line);
        sizes[i] = 0;
        if (len == -1)
            continue; /* nil: not held */
        if (len < 0)
            return PKV__REPLY_BROKEN;
        size_t keep = (size_t)len < value_size ? (size_t)len : value_size;
        uint8_t crlf[2];
        if (read_bytes(&r, staging + (size_t)i * value_size, keep) != 0 ||
            read_bytes(&r, NULL, (size_t)len - keep) != 0 ||
            read_bytes(&r, crlf, 2) != 0 || crlf[0] != '\r' ||
            crlf[1] != '\n')
            return PKV__REPLY_BROKEN;
        sizes[i] = (uint64_t)len;
    }
    /* One command in flight: the reply ends here, nothing was read past
     * it. */
    return r.pos == r.len ? PKV__REPLY_VALUES : PKV__REPLY_BROKEN;
}
