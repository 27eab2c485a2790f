/* SPDX-License-Identifier: MIT */
/* A TCP proxy with slow reads and forgotten connections (tcp_proxy.h):
 * one thread polls the listening socket and every pair of sockets. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "tcp_proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { MAX_PAIRS = 32, CHUNK = 65536, SMALL_BUFFER = 4096 };

typedef struct pair {
    int client, server; /* -1: closed */
    int forgotten;
    uint64_t next_read_ms; /* throttled: the client's next read */
} pair;

struct tp_proxy {
    int listen_fd;
    int port;
    int to_port;
    int wake[2]; /* a byte here: settings changed, or stop */
    pthread_t thread;
    pthread_mutex_t lock;
    /* Under the lock. */
    int stop;
    size_t throttle_bytes;
    long throttle_ms;
    int forget; /* forget the pairs open now */
    /* The thread's. */
    pair pairs[MAX_PAIRS];
    uint8_t buffer[CHUNK];
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void close_pair(pair *q)
{
    if (q->client >= 0)
        close(q->client);
    if (q->server >= 0)
        close(q->server);
    q->client = q->server = -1;
    q->forgotten = 0;
}

/* All n bytes to fd (blocking); 0, or -1. */
static int send_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t sent = send(fd, p, n, MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR)
            continue;
        if (sent <= 0)
            return -1;
        p += sent;
        n -= (size_t)sent;
    }
    return 0;
}

static void accept_one(tp_proxy *p)
{
    int client = accept(p->listen_fd, NULL, NULL);
    if (client < 0)
        return;
    int server = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)p->to_port);
    if (server < 0 ||
        connect(server, (struct sockaddr *)&a, sizeof a) != 0) {
        if (server >= 0)
            close(server);
        close(client);
        return;
    }
    for (int i = 0; i < MAX_PAIRS; i++) {
        if (p->pairs[i].client < 0) {
            p->pairs[i] = (pair){client, server, 0, 0};
            return;
        }
    }
    close(server);
    close(client);
}

/* From one side of q to the other (or nowhere, when forgotten): at most
 * limit bytes. A closed side closes the pair, unless it is forgotten and
 * the server's: the client must not learn of it. */
static void forward(tp_proxy *p, pair *q, int from_client, size_t limit)
{
    int from = from_client ? q->client : q->server;
    int to = from_client ? q->server : q->client;
    ssize_t got = recv(from, p->buffer, limit, MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
                    errno == EINTR))
        return;
    if (got <= 0) {
        if (q->forgotten && !from_client) {
            close(q->server);
            q->server = -1;
        } else {
            close_pair(q);
        }
        return;
    }
    if (!q->forgotten && send_all(to, p->buffer, (size_t)got) != 0)
        close_pair(q);
}

static void *proxy_main(void *arg)
{
    tp_proxy *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int stop = p->stop;
        size_t bytes = p->throttle_bytes;
        long every = p->throttle_ms;
        int forget = p->forget;
        p->forget = 0;
        pthread_mutex_unlock(&p->lock);
        if (stop)
            break;
        for (int i = 0; i < MAX_PAIRS && forget; i++)
            if (p->pairs[i].client >= 0)
                p->pairs[i].forgotten = 1;
        struct pollfd fds[2 + 2 * MAX_PAIRS];
        pair *owner[2 + 2 * MAX_PAIRS];
        int n = 0;
        fds[n++] = (struct pollfd){p->wake[0], POLLIN, 0};
        fds[n++] = (struct pollfd){p->listen_fd, POLLIN, 0};
        uint64_t now = now_ms();
        for (int i = 0; i < MAX_PAIRS; i++) {
            pair *q = &p->pairs[i];
            if (q->client < 0)
                continue;
            if (bytes == 0 || q->forgotten || now >= q->next_read_ms) {
                owner[n] = q;
                fds[n++] = (struct pollfd){q->client, POLLIN, 0};
            }
            if (q->server >= 0) {
                owner[n] = q;
                fds[n++] = (struct pollfd){q->server, POLLIN, 0};
            }
        }
        /* Throttled reads wait for their turn: look again soon. */
        if (poll(fds, (nfds_t)n, bytes > 0 ? 10 : 1000) <= 0)
            continue;
        if (fds[0].revents != 0) {
            char drain[64];
            (void)read(p->wake[0], drain, sizeof drain);
        }
        if (fds[1].revents != 0)
            accept_one(p);
        for (int k = 2; k < n; k++) {
            pair *q = owner[k];
            if (fds[k].revents == 0 || q->client < 0)
                continue;
            int from_client = fds[k].fd == q->client;
            if (!from_client && fds[k].fd != q->server)
                continue; /* the pair was closed and its slot reused */
            size_t limit = CHUNK;
            if (from_client && bytes > 0 && !q->forgotten) {
                limit = bytes < CHUNK ? bytes : CHUNK;
                q->next_read_ms = now_ms() + (uint64_t)every;
            }
            forward(p, q, from_client, limit);
        }
    }
    return NULL;
}

int tp_start(tp_proxy **out, int to_port)
{
    tp_proxy *p = calloc(1, sizeof *p);
    if (p == NULL)
        return -1;
    p->to_port = to_port;
    for (int i = 0; i < MAX_PAIRS; i++)
        p->pairs[i].client = p->pairs[i].server = -1;
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    /* Inherited by accepted sockets: a client's sends wait for the
     * proxy's reads after a few KiB, not after megabytes. */
    int small = SMALL_BUFFER;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (p->listen_fd < 0 || pipe(p->wake) != 0 ||
        setsockopt(p->listen_fd, SOL_SOCKET, SO_RCVBUF, &small,
                   sizeof small) != 0 ||
        bind(p->listen_fd, (struct sockaddr *)&a, len) != 0 ||
        listen(p->listen_fd, 8) != 0 ||
        getsockname(p->listen_fd, (struct sockaddr *)&a, &len) != 0) {
        perror("tp_start");
        free(p);
        return -1;
    }
    p->port = ntohs(a.sin_port);
    pthread_mutex_init(&p->lock, NULL);
    if (pthread_create(&p->thread, NULL, proxy_main, p) != 0) {
        fprintf(stderr, "tp_start: no thread\n");
        free(p);
        return -1;
    }
    *out = p;
    return 0;
}

int tp_port(const tp_proxy *p)
{
    return p->port;
}

static void poke(tp_proxy *p)
{
    char byte = 1;
    (void)write(p->wake[1], &byte, 1);
}

void tp_throttle(tp_proxy *p, size_t bytes, long every_ms)
{
    pthread_mutex_lock(&p->lock);
    p->throttle_bytes = bytes;
    p->throttle_ms = every_ms;
    pthread_mutex_unlock(&p->lock);
    poke(p);
}

void tp_forget(tp_proxy *p)
{
    pthread_mutex_lock(&p->lock);
    p->forget = 1;
    pthread_mutex_unlock(&p->lock);
    poke(p);
    /* Applied before the thread's next poll: wait for it to take it. */
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int pending = p->forget;
        pthread_mutex_unlock(&p->lock);
        if (!pending)
            break;
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
}

void tp_stop(tp_proxy *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_mutex_unlock(&p->lock);
    poke(p);
    pthread_join(p->thread, NULL);
    for (int i = 0; i < MAX_PAIRS; i++)
        close_pair(&p->pairs[i]);
    close(p->listen_fd);
    close(p->wake[0]);
    close(p->wake[1]);
    pthread_mutex_destroy(&p->lock);
    free(p);
}
