/* SPDX-License-Identifier: MIT */
/*
 * A TCP proxy on a loopback port for the connector's network faults
 * (test_redis.c): it forwards each connection to a server's port, and on
 * demand reads what clients send slowly (a server that takes a few KiB
 * now and then), or forgets the connections open now without a word,
 * dropping their bytes both ways and never closing them (a NAT or
 * firewall that timed them out), while new connections go through.
 */
#ifndef PKV_TESTS_TCP_PROXY_H
#define PKV_TESTS_TCP_PROXY_H

#include <stddef.h>

typedef struct tp_proxy tp_proxy;

/* A proxy to 127.0.0.1:to_port, its thread running: 0, or -1 (a message
 * on stderr). */
int tp_start(tp_proxy **out, int to_port);

/* The loopback port clients connect to. */
int tp_port(const tp_proxy *p);

/* From now on, read at most `bytes` of what each client sends every
 * every_ms (its socket's receive buffer is a few KiB, so the client's
 * sends wait); bytes 0: at full speed. */
void tp_throttle(tp_proxy *p, size_t bytes, long every_ms);

/* Forget the connections open now: their bytes are dropped both ways and
 * they stay open until the client closes them. */
void tp_forget(tp_proxy *p);

/* Stop the thread, close every connection, free. NULL: nothing. */
void tp_stop(tp_proxy *p);

#endif
