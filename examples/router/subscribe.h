/* SPDX-License-Identifier: MIT */
/*
 * The router's event thread: a ZeroMQ SUB socket per backend that has an
 * events endpoint, polled by one thread, each message read as events.h
 * says and applied to the index. A backend's blocks are forgotten when
 * its stream cannot be trusted: a gap in its sequence numbers (events
 * were missed: the PUB socket drops them past its high-water mark, and
 * a subscriber that joins late misses the start), numbers that go back
 * (the backend restarted), or a message that is not a batch as
 * documented. A backend with a replay endpoint (vLLM's replay socket:
 * a ROUTER that sends its last messages again from a sequence number
 * on) is asked for everything it kept when the thread starts, so that a
 * router started after its backends (or restarted) knows their blocks,
 * and for what a gap missed, which it then fills instead of forgetting
 * the backend's blocks. Without one, what follows a gap is indexed from
 * then on.
 */
#ifndef PKV_ROUTER_SUBSCRIBE_H
#define PKV_ROUTER_SUBSCRIBE_H

#include "router.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct rt_subscriber {
    rt_router *router;
    void *zmq;     /* the ZeroMQ context */
    void **socks;  /* one per backend; NULL where it has no endpoint */
    pthread_t thread;
    int started;
    atomic_int stop;
} rt_subscriber;

/* Connect the sockets and start the thread. 0, or -1 after printing why
 * (a bad endpoint). */
int rt_subscriber_start(rt_subscriber *s, rt_router *r);

/* Stop the thread and close the sockets. */
void rt_subscriber_stop(rt_subscriber *s);

#endif
