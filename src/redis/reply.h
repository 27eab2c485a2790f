/* SPDX-License-Identifier: MIT */
/*
 * An MGET's reply read from the socket by the connector itself, straight
 * into its staging buffer: values of a few KiB to a few MiB each, which
 * hiredis would read 16 KiB a call (64 system calls a MiB), copy into its
 * reader's buffer and again into one reply object each before the
 * connector copied them a third time. Here one recv takes what the socket
 * holds into a 1 MiB buffer, values are copied from it into the staging
 * buffer, and the connector copies them once more, into the engine's
 * (docs/design.md, "KV store").
 */
#ifndef PKV_REDIS_REPLY_H
#define PKV_REDIS_REPLY_H

#include "io.h"

#include <stddef.h>
#include <stdint.h>

/* What a read of a reply found. */
enum pkv__reply_result {
    PKV__REPLY_VALUES = 0,  /* +OK, or an array of n strings or nils */
    PKV__REPLY_ERROR = 1,   /* an error reply (-OOM ...) and nothing
                               after it: the connection is in step */
    PKV__REPLY_BROKEN = 2,  /* a reply of another shape, or bytes after
                               it: the connection must be dropped */
    PKV__REPLY_TIMEOUT = 3, /* not all of it by the deadline */
    PKV__REPLY_CLOSED = 4   /* the connection closed, reset or failed
                               before the reply's end */
};

/* The read buffer pkv__redis_read_mget takes: 1 MiB, so that one recv
 * can take all the socket holds (values of a few KiB each). */
#define PKV__REPLY_BUFFER ((size_t)1 << 20)

/* Read the reply to an MGET of n keys from socket fd through buffer
 * (PKV__REPLY_BUFFER bytes), all of it by the deadline: value i goes to
 * staging + i * value_size (at most value_size bytes; a longer one is
 * read to its end), its length to sizes[i], 0 for nil. An error reply's
 * line goes to error (as pkv__redis_read_status). Every result but
 * VALUES and ERROR leaves the connection out of step. */
enum pkv__reply_result pkv__redis_read_mget(int fd, uint8_t *buffer,
                                            uint32_t n, uint8_t *staging,
                                            size_t value_size,
                                            uint64_t *sizes,
                                            const pkv__redis_deadline *d,
                                            char *error, size_t error_size);

/* Read the reply to a SET (or AUTH, SELECT) the same way: VALUES for +OK,
 * ERROR for an error line (up to 512 bytes; copied without its '-' into
 * error, error_size bytes, when error is not NULL), BROKEN for anything
 * else. hiredis's reader would take any reply, however many elements a
 * hostile server announces, into memory. */
enum pkv__reply_result pkv__redis_read_status(int fd,
                                              const pkv__redis_deadline *d,
                                              char *error,
                                              size_t error_size);

/* The replies to n pipelined EXISTS of one key each (integers 0 or 1):
 * how many keys, leading, exist, into *leading. VALUES; ERROR for an
 * error reply among them (the first one's line into error, as
 * read_mget), every reply read; BROKEN, TIMEOUT or CLOSED as read_mget. */
enum pkv__reply_result pkv__redis_read_exists(int fd, uint32_t n,
                                              uint32_t *leading,
                                              const pkv__redis_deadline *d,
                                              char *error, size_t error_size);

#endif
