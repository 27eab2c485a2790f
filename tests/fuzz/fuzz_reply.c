/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the Redis connector's reply reader (src/redis/reply.c),
 * which reads what a server sends, hostile or not, straight from the
 * socket: an MGET's array of values or a SET's (AUTH's, SELECT's) status
 * line.
 *
 * The input: byte 0 picks the reader (status or MGET), the MGET's key
 * count (1 to 8) and whether the rest is the reply's bytes themselves or
 * a recipe for a reply that is mostly well formed (random bytes rarely
 * spell one); byte 1 the MGET's value slot size (0 to 64); byte 2 the
 * size of the pieces the bytes arrive in (1 to 256). The bytes go through
 * a SOCK_SEQPACKET socket pair, one message a piece, written by a thread,
 * so the reader's receives end where the pieces do, and the end of input
 * is an end of file.
 *
 * Checked against a reference reader written from the protocol here: the
 * same result (values, error line, a reply of another shape, the
 * connection closed); for values, the same lengths and the first
 * value-slot bytes of each in its slot; for an error, the same line; no
 * read or write outside the buffers given (the slots are allocated to
 * their exact size: ASan).
 */
#include "fuzz_reply.h"
#include "fuzz_check.h"

#include "reply.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

uint64_t pkv_fuzz_ops;

enum { LINE = 512, MAX_KEYS = 8, MAX_REPLY = 1 << 16 };

/* ------------------------------------------------------------ the reply */

typedef struct bytes {
    uint8_t *p;
    size_t n;
} bytes;

static void put(bytes *b, const void *p, size_t n)
{
    if (b->n + n > MAX_REPLY)
        n = MAX_REPLY - b->n;
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void put_s(bytes *b, const char *s)
{
    put(b, s, strlen(s));
}

/* A reply, mostly well formed, from the recipe r[0..n): for a status,
 * one of a few lines, maybe twice; for an MGET, its header and n_keys
 * elements, each a nil, a value, or one of the ways a value goes wrong. */
static void build(bytes *b, int status, uint32_t n_keys, const uint8_t *r,
                  size_t n)
{
    size_t at = 0;
#define NEXT() (at < n ? r[at++] : 0)
    char line[64];
    if (status) {
        static const char *const lines[] = {
            "+OK\r\n", "-NOAUTH Authentication required.\r\n",
            "-ERR Protocol error: unauthenticated bulk length\r\n",
            "+QUEUED\r\n", ":1\r\n", "+OK\n", "-\r\n"};
        put_s(b, lines[NEXT() % 7]);
        if (NEXT() % 4 == 0)
            put_s(b, lines[NEXT() % 7]);
        return;
    }
    uint8_t head = NEXT();
    snprintf(line, sizeof line, "*%u\r\n",
             head % 8 == 0 ? n_keys + 1u : n_keys);
    put_s(b, head % 8 == 1 ? "-OOM command not allowed\r\n" : line);
    for (uint32_t i = 0; i < n_keys; i++) {
        uint8_t op = NEXT();
        uint32_t len = NEXT() % 80u;
        switch (op % 10) {
        case 0:
            put_s(b, "$-1\r\n");
            continue;
        case 1: /* announced one byte off */
            snprintf(line, sizeof line, "$%u\r\n", len + 1u);
            break;
        case 2: /* a length no value has */
            snprintf(line, sizeof line, "$%s\r\n",
                     op & 16 ? "-7" : "99999999999999");
            break;
        case 3: /* another type */
            snprintf(line, sizeof line, ":%u\r\n", len);
            break;
        default:
            snprintf(line, sizeof line, "$%u\r\n", len);
        }
        put_s(b, line);
        for (uint32_t j = 0; j < len; j++) {
            uint8_t v = (uint8_t)(i * 31u + j);
            put(b, &v, 1);
        }
        put_s(b, op % 10 == 4 ? "\rX" : "\r\n");
    }
    if (NEXT() % 8 == 0)
        put_s(b, "+OK\r\n"); /* something after the reply */
#undef NEXT
}

/* ------------------------------------------------------ the reference */

typedef struct ref {
    const uint8_t *p;
    size_t n, pos, piece;
    enum pkv__reply_result failed;
} ref;

/* A line without its CRLF into line: 0, or -1 with failed set. */
static int ref_line(ref *r, char *line)
{
    size_t k = 0;
    for (;;) {
        if (r->pos == r->n) {
            r->failed = PKV__REPLY_CLOSED;
            return -1;
        }
        char c = (char)r->p[r->pos++];
        if (c == '\n' && k > 0 && line[k - 1] == '\r') {
            line[k - 1] = '\0';
            return 0;
        }
        if (k + 1 >= LINE) {
            r->failed = PKV__REPLY_BROKEN;
            return -1;
        }
        line[k++] = c;
    }
}

/* The protocol's integer after the type byte, or -2 (none, or too
 * large for any value). */
static long long ref_number(const char *line)
{
    const char *p = line + 1;
    int negative = *p == '-';
    p += negative;
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

/* Nothing read past the reply: the reader receives a piece at a time,
 * so it can see only what follows in the piece where the reply ended. */
static enum pkv__reply_result ref_end(const ref *r,
                                      enum pkv__reply_result got)
{
    return r->pos == r->n || r->pos % r->piece == 0 ? got
                                                    : PKV__REPLY_BROKEN;
}

static enum pkv__reply_result ref_status(ref *r, char *error)
{
    char line[LINE];
    if (ref_line(r, line) != 0)
        return r->failed;
    if (line[0] == '-')
        strcpy(error, line + 1);
    return ref_end(r, strcmp(line, "+OK") == 0 ? PKV__REPLY_VALUES
                      : line[0] == '-'         ? PKV__REPLY_ERROR
                                               : PKV__REPLY_BROKEN);
}

static enum pkv__reply_result ref_mget(ref *r, uint32_t n, uint64_t *sizes,
                                       size_t *at, char *error)
{
    char line[LINE];
    if (ref_line(r, line) != 0)
        return r->failed;
    if (line[0] == '-') {
        strcpy(error, line + 1);
        return ref_end(r, PKV__REPLY_ERROR);
    }
    if (line[0] != '*' || ref_number(line) != (long long)n)
        return PKV__REPLY_BROKEN;
    for (uint32_t i = 0; i < n; i++) {
        if (ref_line(r, line) != 0)
            return r->failed;
        if (line[0] != '$')
            return PKV__REPLY_BROKEN;
        long long len = ref_number(line);
        sizes[i] = 0;
        if (len == -1)
            continue;
        if (len < 0)
            return PKV__REPLY_BROKEN;
        at[i] = r->pos;
        if ((size_t)len + 2 > r->n - r->pos) {
            r->pos = r->n;
            return PKV__REPLY_CLOSED;
        }
        r->pos += (size_t)len + 2;
        if (r->p[r->pos - 2] != '\r' || r->p[r->pos - 1] != '\n')
            return PKV__REPLY_BROKEN;
        sizes[i] = (uint64_t)len;
    }
    return ref_end(r, PKV__REPLY_VALUES);
}

/* ------------------------------------------------------- the transport */

typedef struct writer {
    int fd;
    const uint8_t *p;
    size_t n, piece;
} writer;

/* The reply a piece a message, then the end of file. A reader that
 * stopped early closes its end: the sends fail and this ends. */
static void *write_pieces(void *arg)
{
    writer *w = arg;
    for (size_t at = 0; at < w->n; at += w->piece) {
        size_t k = w->n - at < w->piece ? w->n - at : w->piece;
        if (send(w->fd, w->p + at, k, MSG_NOSIGNAL) != (ssize_t)k)
            break;
    }
    shutdown(w->fd, SHUT_WR);
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t *read_buffer;
    static uint8_t reply[MAX_REPLY];
    pkv_fuzz_ops++;
    if (size < 3)
        return 0;
    if (read_buffer == NULL) {
        read_buffer = malloc(PKV__REPLY_BUFFER);
        CHECK(read_buffer != NULL);
    }
    int status = data[0] & 1;
    uint32_t n = 1 + (uint32_t)(data[0] >> 1) % MAX_KEYS;
    size_t slot = data[1] % 65u;
    size_t piece = 1 + (size_t)data[2];
    bytes b = {reply, 0};
    if (data[0] & 0x80)
        build(&b, status, n, data + 3, size - 3);
    else
        put(&b, data + 3, size - 3);

    int fds[2];
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, fds) == 0);
    writer w = {fds[1], b.p, b.n, piece};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, write_pieces, &w) == 0);
    /* The slots at their exact size: a write past one is ASan's. */
    uint8_t *staging = malloc(n * slot > 0 ? n * slot : 1);
    uint64_t sizes[MAX_KEYS];
    char error[LINE] = "", want_error[LINE] = "";
    CHECK(staging != NULL);
    pkv__redis_deadline d = pkv__redis_deadline_in(10000, 10000);
    enum pkv__reply_result got =
        status ? pkv__redis_read_status(fds[0], &d, error, sizeof error)
               : pkv__redis_read_mget(fds[0], read_buffer, n, staging, slot,
                                      sizes, &d, error, sizeof error);
    close(fds[0]);
    CHECK(pthread_join(thread, NULL) == 0);
    close(fds[1]);

    ref r = {b.p, b.n, 0, piece, PKV__REPLY_BROKEN};
    uint64_t want_sizes[MAX_KEYS];
    size_t at[MAX_KEYS];
    enum pkv__reply_result want =
        status ? ref_status(&r, want_error)
               : ref_mget(&r, n, want_sizes, at, want_error);
    CHECK(got == want);
    if (got == PKV__REPLY_ERROR)
        CHECK(strcmp(error, want_error) == 0);
    if (got == PKV__REPLY_VALUES && !status) {
        for (uint32_t i = 0; i < n; i++) {
            CHECK(sizes[i] == want_sizes[i]);
            size_t keep = sizes[i] < slot ? (size_t)sizes[i] : slot;
            CHECK(memcmp(staging + i * slot, b.p + at[i], keep) == 0);
        }
    }
    free(staging);
    return 0;
}
