/* SPDX-License-Identifier: MIT */
/* Replies to MGET, SET and pipelined EXISTS, read straight from the socket
 * (reply.h). */
#include "reply.h"

#include <string.h>

enum { LINE_MAX = 512 };

/* The reply is read through a buffer (for an MGET the caller's,
 * PKV__REPLY_BUFFER bytes): one receive takes whatever the socket holds,
 * many values' worth, where hiredis takes 16 KiB; a payload larger than
 * the buffer goes straight to its slot. */
typedef struct reader {
    int fd;
    size_t pos, len, cap;
    uint8_t *buf;
    const pkv__redis_deadline *deadline;
    enum pkv__reply_result failed; /* why the last read failed */
} reader;

/* Receive into `to`; on failure set r->failed and return -1. */
static ssize_t receive(reader *r, void *to, size_t n)
{
    ssize_t got = pkv__redis_receive(r->fd, to, n, r->deadline);
    if (got > 0)
        return got;
    r->failed = got == PKV__IO_TIMEOUT ? PKV__REPLY_TIMEOUT
                                       : PKV__REPLY_CLOSED;
    return -1;
}

/* More bytes into the buffer (it is empty). 0, or -1. */
static int fill(reader *r)
{
    ssize_t got = receive(r, r->buf, r->cap);
    if (got < 0)
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
        if (n + 1 >= LINE_MAX) {
            r->failed = PKV__REPLY_BROKEN;
            return -1;
        }
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
        } else if (to != NULL && n >= r->cap) {
            /* A large payload: straight into its slot. */
            ssize_t got = receive(r, to, n);
            if (got < 0)
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

/* line, an error reply without its '-', into error (error_size bytes,
 * truncated), when error is not NULL. */
static void copy_error(const char *line, char *error, size_t error_size)
{
    if (error == NULL || error_size == 0)
        return;
    size_t n = strlen(line + 1);
    n = n < error_size - 1 ? n : error_size - 1;
    memcpy(error, line + 1, n);
    error[n] = '\0';
}

enum pkv__reply_result pkv__redis_read_status(int fd,
                                              const pkv__redis_deadline *d,
                                              char *error,
                                              size_t error_size)
{
    /* A status line fits; more than one line's worth is a broken reply
     * (one command in flight: nothing may follow its reply). */
    uint8_t buffer[2 * LINE_MAX];
    reader r = {fd, 0, 0, sizeof buffer, buffer, d, PKV__REPLY_BROKEN};
    char line[LINE_MAX];
    if (read_line(&r, line) != 0)
        return r.failed;
    enum pkv__reply_result got = strcmp(line, "+OK") == 0 ? PKV__REPLY_VALUES
                                 : line[0] == '-'        ? PKV__REPLY_ERROR
                                                         : PKV__REPLY_BROKEN;
    if (got == PKV__REPLY_ERROR)
        copy_error(line, error, error_size);
    return r.pos == r.len ? got : PKV__REPLY_BROKEN;
}

enum pkv__reply_result pkv__redis_read_mget(int fd, uint8_t *buffer,
                                            uint32_t n, uint8_t *staging,
                                            size_t value_size,
                                            uint64_t *sizes,
                                            const pkv__redis_deadline *d,
                                            char *error, size_t error_size)
{
    reader r = {fd, 0, 0, PKV__REPLY_BUFFER, buffer, d, PKV__REPLY_BROKEN};
    char line[LINE_MAX];
    if (read_line(&r, line) != 0)
        return r.failed;
    if (line[0] == '-') {
        copy_error(line, error, error_size);
        return r.pos == r.len ? PKV__REPLY_ERROR : PKV__REPLY_BROKEN;
    }
    if (line[0] != '*' || number(line) != (long long)n)
        return PKV__REPLY_BROKEN;
    for (uint32_t i = 0; i < n; i++) {
        if (read_line(&r, line) != 0)
            return r.failed;
        if (line[0] != '$')
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
            read_bytes(&r, crlf, 2) != 0)
            return r.failed;
        if (crlf[0] != '\r' || crlf[1] != '\n')
            return PKV__REPLY_BROKEN;
        sizes[i] = (uint64_t)len;
    }
    /* One command in flight: the reply ends here, nothing was read past
     * it. */
    return r.pos == r.len ? PKV__REPLY_VALUES : PKV__REPLY_BROKEN;
}

enum pkv__reply_result pkv__redis_read_exists(int fd, uint32_t n,
                                              uint32_t *leading,
                                              const pkv__redis_deadline *d,
                                              char *error, size_t error_size)
{
    uint8_t buffer[4096];
    reader r = {fd, 0, 0, sizeof buffer, buffer, d, PKV__REPLY_BROKEN};
    char line[LINE_MAX];
    enum pkv__reply_result got = PKV__REPLY_VALUES;
    int run = 1;
    *leading = 0;
    /* Every reply is read, whatever the first ones said: the connection
     * stays in step. */
    for (uint32_t i = 0; i < n; i++) {
        if (read_line(&r, line) != 0)
            return r.failed;
        if (line[0] == '-') {
            if (got == PKV__REPLY_VALUES)
                copy_error(line, error, error_size);
            got = PKV__REPLY_ERROR;
            continue;
        }
        long long v = line[0] == ':' ? number(line) : -2;
        if (v != 0 && v != 1)
            return PKV__REPLY_BROKEN;
        run = run && v == 1;
        *leading += (uint32_t)run;
    }
    return r.pos == r.len ? got : PKV__REPLY_BROKEN;
}
