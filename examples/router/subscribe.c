/* SPDX-License-Identifier: MIT */
/* The router's event thread (subscribe.h). */
#include "subscribe.h"

#include <zmq.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A message larger than this closes the connection (ZMQ_MAXMSGSIZE): the
 * bytes come from the network, and reading one may take 24 bytes of
 * msgpack objects for each of its bytes (events.c), so at most 192 MiB.
 * A batch storing a 32k-token prompt's blocks is about 200 KiB. */
#define MAX_MESSAGE (8ll << 20)
#define POLL_MS 100
/* Frames read of one message at most: topic, sequence, payload. */
#define FRAMES 3

/* How long a replay may take to answer before it is given up. */
#define REPLAY_WAIT_MS 2000

/* Backend b's message seq, payload[0, len), applied in order. */
static void apply(rt_subscriber *s, uint32_t b, uint64_t seq,
                  const void *payload, size_t len)
{
    rt_feed *f = &s->router->backends[b].feed;
    f->have_seq = 1;
    f->next_seq = seq + 1;
    if (rt_events_apply(&s->router->index, f, payload, len) != 0)
        rt_feed_reset(&s->router->index, f);
}

/* Ask backend b's replay socket for its messages from `from` on, and
 * apply those before `until` that follow on from what the feed has
 * (from the first one it sends when the feed has nothing yet). 0 when
 * the feed then expects `until` (or, with until UINT64_MAX, when the
 * replay ended); -1 when the backend does not answer in time or no
 * longer keeps what is missing. */
static int replay(rt_subscriber *s, uint32_t b, uint64_t from,
                  uint64_t until)
{
    rt_backend *c = &s->router->backends[b];
    rt_feed *f = &c->feed;
    void *sock = zmq_socket(s->zmq, ZMQ_DEALER);
    int linger = 0, wait = REPLAY_WAIT_MS, ended = 0, followed = 1;
    int64_t max = MAX_MESSAGE;
    uint8_t start[8];
    for (int i = 0; i < 8; i++)
        start[i] = (uint8_t)(from >> (56 - 8 * i));
    if (sock == NULL ||
        zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        zmq_setsockopt(sock, ZMQ_SNDTIMEO, &wait, sizeof wait) != 0 ||
        zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max, sizeof max) != 0 ||
        zmq_connect(sock, c->replay) != 0 ||
        zmq_send(sock, "", 0, ZMQ_SNDMORE) < 0 ||
        zmq_send(sock, start, sizeof start, 0) < 0) {
        if (sock != NULL)
            zmq_close(sock);
        return -1;
    }
    /* The answer: [ "", seq, payload ] each, then [ "", -1, "" ]. */
    while (!ended && !atomic_load(&s->stop)) {
        zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, REPLAY_WAIT_MS) <= 0)
            break;
        zmq_msg_t frames[FRAMES];
        int n = 0, more = 1;
        while (more) {
            zmq_msg_t extra, *m = n < FRAMES ? &frames[n] : &extra;
            zmq_msg_init(m);
            if (zmq_msg_recv(m, sock, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(m);
                break;
            }
            more = zmq_msg_more(m);
            if (m == &extra)
                zmq_msg_close(m);
            else
                n++;
        }
        if (n != FRAMES || zmq_msg_size(&frames[1]) != 8) {
            followed = 0; /* not the documented shape */
            ended = 1;
        } else {
            const uint8_t *p = zmq_msg_data(&frames[1]);
            uint64_t seq = 0;
            for (int i = 0; i < 8; i++)
                seq = seq << 8 | p[i];
            if (seq == UINT64_MAX) {
                ended = 1;
            } else if (seq < until && followed) {
                if (f->have_seq && seq != f->next_seq) {
                    followed = 0; /* the backend no longer keeps it */
                } else {
                    apply(s, b, seq, zmq_msg_data(&frames[2]),
                          zmq_msg_size(&frames[2]));
                    f->replayed++;
                }
            }
        }
        for (int i = 0; i < n; i++)
            zmq_msg_close(&frames[i]);
    }
    zmq_close(sock);
    if (!ended || !followed)
        return -1;
    return until == UINT64_MAX || (f->have_seq && f->next_seq == until)
               ? 0
               : -1;
}

/* The feed's figures, where /metrics reads them. */
static void publish_figures(rt_subscriber *s, uint32_t b)
{
    rt_router *r = s->router;
    rt_backend *c = &r->backends[b];
    pthread_mutex_lock(&r->lock);
    c->event_batches = c->feed.batches;
    c->event_gaps = c->feed.gaps;
    c->event_bad = c->feed.bad;
    c->event_replayed = c->feed.replayed;
    pthread_mutex_unlock(&r->lock);
}

/* A live message seq of backend b: applied when it follows on; one the
 * last replay sent already is skipped; a gap is filled by a replay where
 * the backend has one, else (or when that fails) the backend's blocks
 * are forgotten and indexing starts again from it. */
static void accept_message(rt_subscriber *s, uint32_t b, uint64_t seq,
                           const void *payload, size_t len)
{
    rt_router *r = s->router;
    rt_feed *f = &r->backends[b].feed;
    if (f->have_seq && f->catching_up && seq < f->next_seq)
        return;
    f->catching_up = 0;
    if (f->have_seq && seq != f->next_seq) {
        int filled = seq > f->next_seq && r->backends[b].replay != NULL &&
                     replay(s, b, f->next_seq, seq) == 0;
        if (!filled) {
            f->gaps++;
            rt_feed_reset(&r->index, f);
        }
    }
    apply(s, b, seq, payload, len);
}

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
        accept_message(s, b, seq, zmq_msg_data(&frames[2]),
                       zmq_msg_size(&frames[2]));
    } else if (n > 0) {
        /* Not the documented three frames: what it said is unknown. */
        f->bad++;
        f->have_seq = 0;
        rt_feed_reset(&r->index, f);
    }
    for (int i = 0; i < n; i++)
        zmq_msg_close(&frames[i]);
    publish_figures(s, b);
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
    /* What each backend kept before the router started. The SUB sockets
     * are connected already: what is published meanwhile waits there,
     * and what the replay sent of it is skipped (catching_up). */
    for (uint32_t b = 0; b < r->num_backends; b++) {
        rt_feed *f = &r->backends[b].feed;
        if (r->backends[b].replay == NULL || atomic_load(&s->stop))
            continue;
        if (replay(s, b, 0, UINT64_MAX) != 0) {
            fprintf(stderr, "pkv-router: no replay from %s: its blocks are "
                            "indexed as it stores them\n",
                    r->backends[b].replay);
            rt_feed_reset(&r->index, f);
            f->have_seq = 0;
        }
        f->catching_up = f->have_seq;
        publish_figures(s, b);
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
