/* SPDX-License-Identifier: MIT */
/*
 * Bytes to and from the server's socket under one deadline per command
 * (io.c). A command and its reply must be done by the deadline, and no
 * wait for the reply's bytes may pass timeout_ms: a server that reads or
 * writes a few bytes now and then cannot hold a connection past the one,
 * a server that stopped answering cannot hold it past the other. The
 * socket's own timeouts (SO_SNDTIMEO, SO_RCVTIMEO) would bound each call,
 * and each call's progress would start the next one's clock afresh.
 */
#ifndef PKV_REDIS_IO_H
#define PKV_REDIS_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The bounds of one command, sent and answered. */
typedef struct pkv__redis_deadline {
    uint64_t end_ms;  /* CLOCK_MONOTONIC: all of it by then */
    uint32_t wait_ms; /* the longest wait for a reply's bytes */
} pkv__redis_deadline;

/* What a send or a receive found, besides bytes moved. */
enum {
    PKV__IO_TIMEOUT = -1, /* no progress within wait_ms, or past end_ms */
    PKV__IO_CLOSED = -2,  /* the peer closed or reset the connection */
    PKV__IO_FAILED = -3   /* another error of the socket */
};

/* Milliseconds of CLOCK_MONOTONIC. */
uint64_t pkv__redis_now_ms(void);

/* A command's deadline from now: within `whole_ms` in all, no wait longer
 * than `wait_ms`. */
pkv__redis_deadline pkv__redis_deadline_in(uint32_t whole_ms,
                                           uint32_t wait_ms);

/* Send n bytes on fd by the deadline (never raising SIGPIPE): 0 when all
 * went, else PKV__IO_TIMEOUT, _CLOSED or _FAILED. */
int pkv__redis_send(int fd, const void *data, size_t n,
                    const pkv__redis_deadline *d);

/* Receive up to n bytes from fd once some arrive by the deadline: their
 * count, 0 at EOF, or PKV__IO_TIMEOUT, _CLOSED (reset) or _FAILED. */
ssize_t pkv__redis_receive(int fd, void *to, size_t n,
                           const pkv__redis_deadline *d);

#endif
