/* SPDX-License-Identifier: MIT */
/* pkv-server's KV events publisher (events.h): msgpack (msgpack-c) over a
 * ZeroMQ PUB socket (libzmq). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "events.h"

#include <msgpack.h>
#include <zmq.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Messages a slow subscriber may have queued before PUB drops: vLLM's
 * default. */
#define HIGH_WATER_MARK 100000
/* Messages kept for replay; how long the replay thread waits for a
 * request before it looks whether it should end. */
#define REPLAY_KEEP 1024u
#define REPLAY_POLL_MS 100
/* A ROUTER's peer identity is at most 255 bytes. */
#define IDENTITY_MAX 255u

typedef struct kept_message {
    uint64_t seq;
    void *payload;
    size_t size;
} kept_message;

struct srv_events {
    void *context;
    void *pub;    /* the stepping thread's */
    void *replay; /* ROUTER, or NULL: the replay thread's */
    char *topic;
    const char *medium; /* "GPU" or "CPU" */
    msgpack_sbuffer buffer; /* a batch, kept between batches */
    pthread_t replay_thread;
    int replay_started;
    atomic_int stop;
    /* Under lock: the stepping thread writes, the replay thread reads. */
    pthread_mutex_t lock;
    uint64_t seq; /* the next message's */
    kept_message kept[REPLAY_KEEP]; /* by seq % REPLAY_KEEP */
};

static void *replay_main(void *arg);

/* endpoint bound if it holds '*' or "::", or is ipc:// or inproc://
 * (vLLM's rule), else connected. */
static int attach(void *socket, const char *endpoint)
{
    int bind = strchr(endpoint, '*') != NULL ||
               strstr(endpoint, "::") != NULL ||
               strncmp(endpoint, "ipc://", 6) == 0 ||
               strncmp(endpoint, "inproc://", 9) == 0;
    return bind ? zmq_bind(socket, endpoint) : zmq_connect(socket, endpoint);
}

srv_events *srv_events_open(const char *endpoint, const char *replay,
                            const char *topic)
{
    srv_events *ev = calloc(1, sizeof *ev);
    if (ev == NULL || (ev->topic = strdup(topic)) == NULL) {
        fprintf(stderr, "pkv-server: --kv-events: out of memory\n");
        srv_events_close(ev);
        return NULL;
    }
    ev->medium = "CPU";
    msgpack_sbuffer_init(&ev->buffer);
    pthread_mutex_init(&ev->lock, NULL);
    atomic_init(&ev->stop, 0);
    int hwm = HIGH_WATER_MARK, linger = 0;
    ev->context = zmq_ctx_new();
    ev->pub = ev->context != NULL ? zmq_socket(ev->context, ZMQ_PUB) : NULL;
    int ok = ev->pub != NULL &&
             zmq_setsockopt(ev->pub, ZMQ_SNDHWM, &hwm, sizeof hwm) == 0 &&
             zmq_setsockopt(ev->pub, ZMQ_LINGER, &linger, sizeof linger) ==
                 0 &&
             attach(ev->pub, endpoint) == 0;
    if (!ok) {
        fprintf(stderr, "pkv-server: --kv-events %s: %s\n", endpoint,
                zmq_strerror(zmq_errno()));
        srv_events_close(ev);
        return NULL;
    }
    if (replay == NULL)
        return ev;
    ev->replay = zmq_socket(ev->context, ZMQ_ROUTER);
    /* The high-water mark above every kept message: a replay is sent at
     * once, and ROUTER drops what is past it. */
    if (ev->replay == NULL ||
        zmq_setsockopt(ev->replay, ZMQ_SNDHWM, &hwm, sizeof hwm) != 0 ||
        zmq_setsockopt(ev->replay, ZMQ_LINGER, &linger, sizeof linger) !=
            0 ||
        zmq_bind(ev->replay, replay) != 0) {
        fprintf(stderr, "pkv-server: --kv-events-replay %s: %s\n", replay,
                zmq_strerror(zmq_errno()));
        srv_events_close(ev);
        return NULL;
    }
    if (pthread_create(&ev->replay_thread, NULL, replay_main, ev) != 0) {
        fprintf(stderr, "pkv-server: --kv-events-replay: no thread\n");
        srv_events_close(ev);
        return NULL;
    }
    ev->replay_started = 1;
    return ev;
}

void srv_events_close(srv_events *ev)
{
    if (ev == NULL)
        return;
    if (ev->replay_started) {
        atomic_store(&ev->stop, 1);
        pthread_join(ev->replay_thread, NULL);
    }
    if (ev->pub != NULL)
        zmq_close(ev->pub);
    if (ev->replay != NULL)
        zmq_close(ev->replay);
    for (uint32_t i = 0; i < REPLAY_KEEP; i++)
        free(ev->kept[i].payload);
    if (ev->context != NULL)
        zmq_ctx_term(ev->context);
    msgpack_sbuffer_destroy(&ev->buffer);
    pthread_mutex_destroy(&ev->lock);
    free(ev->topic);
    free(ev);
}

void srv_events_set_medium(srv_events *ev, const char *backend_name)
{
    ev->medium = strncmp(backend_name, "opencl", 6) == 0 ? "GPU" : "CPU";
}

static void pack_string(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void pack_stored(msgpack_packer *pk, const srv_events *ev,
                        const pkv_kv_event *e)
{
    msgpack_pack_array(pk, 12);
    pack_string(pk, "BlockStored");
    msgpack_pack_array(pk, 1);
    msgpack_pack_uint64(pk, e->hash);
    if (e->flags & PKV_KV_EVENT_HAS_PARENT)
        msgpack_pack_uint64(pk, e->parent_hash);
    else
        msgpack_pack_nil(pk);
    msgpack_pack_array(pk, e->block_size);
    for (uint32_t i = 0; i < e->block_size; i++)
        msgpack_pack_int32(pk, e->token_ids[i]);
    msgpack_pack_uint32(pk, e->block_size);
    msgpack_pack_nil(pk); /* lora_id */
    pack_string(pk, ev->medium);
    msgpack_pack_nil(pk); /* lora_name */
    msgpack_pack_nil(pk); /* extra_keys */
    msgpack_pack_uint32(pk, e->group);
    pack_string(pk, e->window != 0 ? "sliding_window" : "full_attention");
    if (e->window != 0)
        msgpack_pack_uint32(pk, e->window);
    else
        msgpack_pack_nil(pk);
}

static void pack_event(msgpack_packer *pk, const srv_events *ev,
                       const pkv_kv_event *e)
{
    switch (e->kind) {
    case PKV_KV_EVENT_STORED:
        pack_stored(pk, ev, e);
        break;
    case PKV_KV_EVENT_REMOVED:
        msgpack_pack_array(pk, 4);
        pack_string(pk, "BlockRemoved");
        msgpack_pack_array(pk, 1);
        msgpack_pack_uint64(pk, e->hash);
        pack_string(pk, ev->medium);
        msgpack_pack_uint32(pk, e->group);
        break;
    default: /* PKV_KV_EVENT_ALL_CLEARED */
        msgpack_pack_array(pk, 1);
        pack_string(pk, "AllBlocksCleared");
        break;
    }
}

/* The sequence number as 8 big-endian bytes (-1: all ones). */
static void seq_bytes(uint64_t seq, uint8_t out[8])
{
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(seq >> (56 - 8 * i));
}

/* The next frame of a request into buf (at most cap bytes); its size,
 * or -1 for a frame larger than cap or a failed receive. *more: frames
 * follow. */
static int receive_frame(void *socket, void *buf, size_t cap, int *more)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    int n = zmq_msg_recv(&m, socket, ZMQ_DONTWAIT);
    size_t size = zmq_msg_size(&m);
    if (n >= 0 && buf != NULL && size > 0 && size <= cap)
        memcpy(buf, zmq_msg_data(&m), size);
    *more = n >= 0 && zmq_msg_more(&m);
    zmq_msg_close(&m);
    return n >= 0 && size <= cap ? (int)size : -1;
}

/* One replay request on the ROUTER, as vLLM's publisher serves them: a
 * request is [identity, "", start (8 bytes, big-endian)]; the answer
 * every kept message from start on, each [identity, "", seq, payload],
 * then [identity, "", -1, ""]. A request of another shape is dropped.
 * The answer is sent under the lock (never waiting: a peer past the
 * high-water mark loses the rest, as it would on the PUB socket). */
static void serve_replay(srv_events *ev)
{
    uint8_t id[IDENTITY_MAX], empty[1], start[8];
    int more = 0;
    int id_n = receive_frame(ev->replay, id, sizeof id, &more);
    int empty_n = more ? receive_frame(ev->replay, empty, 0, &more) : -1;
    int start_n =
        more ? receive_frame(ev->replay, start, sizeof start, &more) : -1;
    while (more) /* drop what a malformed request adds */
        receive_frame(ev->replay, NULL, 0, &more);
    if (id_n <= 0 || empty_n != 0 || start_n != 8)
        return;
    uint64_t from = 0;
    for (int i = 0; i < 8; i++)
        from = from << 8 | start[i];
    uint8_t seq[8];
    pthread_mutex_lock(&ev->lock);
    uint64_t oldest = ev->seq > REPLAY_KEEP ? ev->seq - REPLAY_KEEP : 0;
    for (uint64_t q = from > oldest ? from : oldest; q < ev->seq; q++) {
        const kept_message *k = &ev->kept[q % REPLAY_KEEP];
        if (k->payload == NULL || k->seq != q)
            continue; /* not kept: out of memory then */
        seq_bytes(q, seq);
        zmq_send(ev->replay, id, (size_t)id_n, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(ev->replay, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(ev->replay, seq, sizeof seq, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(ev->replay, k->payload, k->size, ZMQ_DONTWAIT);
    }
    pthread_mutex_unlock(&ev->lock);
    seq_bytes(UINT64_MAX, seq);
    zmq_send(ev->replay, id, (size_t)id_n, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(ev->replay, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(ev->replay, seq, sizeof seq, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(ev->replay, "", 0, ZMQ_DONTWAIT);
}

/* The replay thread: requests answered as they come, idle or not. */
static void *replay_main(void *arg)
{
    srv_events *ev = arg;
    while (!atomic_load(&ev->stop)) {
        zmq_pollitem_t item = {ev->replay, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, REPLAY_POLL_MS) > 0)
            serve_replay(ev);
    }
    return NULL;
}

/* Keep the batch just packed for replay (a batch kept without memory is
 * left out of replays). Under the lock. */
static void keep(srv_events *ev)
{
    kept_message *k = &ev->kept[ev->seq % REPLAY_KEEP];
    void *copy = realloc(k->payload, ev->buffer.size);
    if (copy == NULL) {
        free(k->payload);
        k->payload = NULL;
        return;
    }
    memcpy(copy, ev->buffer.data, ev->buffer.size);
    k->payload = copy;
    k->size = ev->buffer.size;
    k->seq = ev->seq;
}

void srv_events_publish(void *user, const pkv_kv_event *events,
                        uint32_t count)
{
    srv_events *ev = user;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    msgpack_sbuffer_clear(&ev->buffer);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &ev->buffer, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_double(&pk, (double)now.tv_sec + (double)now.tv_nsec * 1e-9);
    msgpack_pack_array(&pk, count);
    for (uint32_t i = 0; i < count; i++)
        pack_event(&pk, ev, &events[i]);
    msgpack_pack_uint32(&pk, 0); /* data_parallel_rank */
    uint8_t seq[8];
    pthread_mutex_lock(&ev->lock);
    seq_bytes(ev->seq, seq);
    if (ev->replay != NULL)
        keep(ev);
    ev->seq++;
    pthread_mutex_unlock(&ev->lock);
    /* Never waits: a subscriber past the high-water mark misses the
     * message (and sees the gap in the sequence numbers). */
    zmq_send(ev->pub, ev->topic, strlen(ev->topic), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(ev->pub, seq, sizeof seq, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(ev->pub, ev->buffer.data, ev->buffer.size, ZMQ_DONTWAIT);
}
