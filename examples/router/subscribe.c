/* SPDX-License-Identifier: MIT */
/* The router's event thread (subscribe.h). */
#include "subscribe.h"

#include <zmq.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A message larger than this closes the connection (ZMQ_MAXMSGSIZE): the
 * bytes come from the network. */
#define MAX_MESSAGE (64ll << 20)
#define POLL_MS 100
/* Frames read of one message at most: topic, sequence, payload. */
#define FRAMES 3

/* One message of backend b's stream, its frames read (more than FRAMES
 * are drained and make the message bad). */
static void receive(rt_subscriber *s, uint32_t b)
{
    rt_router *r = s->router;
    rt_feed *f = &r->backends[b].feed;
    zmq_msg_t frames[FRAMES];
    int n = 0, more = 1, ok = 1;
    while (more) {
        zmq_msg_t extra;
        zmq_msg_t *m = n < FRAMES ? &frames[n] : &extra;
        zmq_msg_init(m);
        if (zmq_msg_recv(m, s->socks[b], ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(m);
            ok = 0;
            break;
        }
        more = zmq_msg_more(m);
        if (m == &extra) {
            zmq_msg_close(m);
            ok = 0;
        } else {
            n++;
        }
    }
    if (ok && n == FRAMES && zmq_msg_size(&frames[1]) == 8) {
        const uint8_t *p = zmq_msg_data(&frames[1]);
        uint64_t seq = 0;
        for (int i = 0; i < 8; i++)
            seq = seq << 8 | p[i];
        if (f->have_seq && seq != f->next_seq) {
            f->gaps++;
            rt_feed_reset(&r->index, f);
        }
        f->have_seq = 1;
        f->next_seq = seq + 1;
        if (rt_events_apply(&r->index, f, zmq_msg_data(&frames[2]),
                            zmq_msg_size(&frames[2])) != 0)
            rt_feed_reset(&r->index, f);
    } else if (n > 0) {
        /* Not the documented three frames: what it said is unknown. */
        f->bad++;
        f->have_seq = 0;
        rt_feed_reset(&r->index, f);
    }
    for (int i = 0; i < n; i++)
        zmq_msg_close(&frames[i]);
    pthread_mutex_lock(&r->lock);
    r->backends[b].event_batches = f->batches;
    r->backends[b].event_gaps = f->gaps;
    r->backends[b].event_bad = f->bad;
    pthread_mutex_unlock(&r->lock);
}

static void *run(void *arg)
{
    rt_subscriber *s = arg;
    rt_router *r = s->router;
    zmq_pollitem_t items[RT_MAX_BACKENDS];
    uint32_t which[RT_MAX_BACKENDS], n = 0;
    for (uint32_t b = 0; b < r->num_backends; b++) {
        if (s->socks[b] == NULL)
            continue;
        items[n] = (zmq_pollitem_t){s->socks[b], 0, ZMQ_POLLIN, 0};
        which[n++] = b;
    }
    while (!atomic_load(&s->stop)) {
        if (zmq_poll(items, (int)n, POLL_MS) < 0)
            continue; /* EINTR */
        for (uint32_t i = 0; i < n; i++)
            if (items[i].revents & ZMQ_POLLIN)
                receive(s, which[i]);
    }
    return NULL;
}

int rt_subscriber_start(rt_subscriber *s, rt_router *r)
{
    memset(s, 0, sizeof *s);
    s->router = r;
    atomic_init(&s->stop, 0);
    s->zmq = zmq_ctx_new();
    s->socks = calloc(r->num_backends, sizeof *s->socks);
    if (s->zmq == NULL || s->socks == NULL) {
        fprintf(stderr, "pkv-router: out of memory\n");
        rt_subscriber_stop(s);
        return -1;
    }
    int64_t max = MAX_MESSAGE;
    int linger = 0;
    for (uint32_t b = 0; b < r->num_backends; b++) {
        rt_backend *c = &r->backends[b];
        c->feed.backend = b;
        c->feed.group = RT_GROUP_UNSET;
        if (c->events == NULL)
            continue;
        void *sock = s->socks[b] = zmq_socket(s->zmq, ZMQ_SUB);
        if (sock == NULL ||
            zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max, sizeof max) != 0 ||
            zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
            zmq_setsockopt(sock, ZMQ_SUBSCRIBE, "", 0) != 0 ||
            zmq_connect(sock, c->events) != 0) {
            fprintf(stderr, "pkv-router: the events of %s at %s: %s\n",
                    c->url, c->events, zmq_strerror(zmq_errno()));
            rt_subscriber_stop(s);
            return -1;
        }
    }
    if (pthread_create(&s->thread, NULL, run, s) != 0) {
        fprintf(stderr, "pkv-router: cannot start the event thread\n");
        rt_subscriber_stop(s);
        return -1;
    }
    s->started = 1;
    return 0;
}

void rt_subscriber_stop(rt_subscriber *s)
{
    if (s->started) {
        atomic_store(&s->stop, 1);
        pthread_join(s->thread, NULL);
    }
    for (uint32_t b = 0; s->socks != NULL && b < s->router->num_backends;
         b++)
        if (s->socks[b] != NULL)
            zmq_close(s->socks[b]);
    free(s->socks);
    if (s->zmq != NULL)
        zmq_ctx_term(s->zmq);
    memset(s, 0, sizeof *s);
}
