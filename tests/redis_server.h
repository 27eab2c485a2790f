/* SPDX-License-Identifier: MIT */
/*
 * A private redis-server for tests: started on 127.0.0.1 on a free port
 * (never 6379), with no persistence, in a temporary directory, and killed
 * with the test process if that dies first (Linux). Helpers stop, kill,
 * restart, freeze (SIGSTOP) and thaw it, and send it commands; another
 * puts it behind TLS with a stunnel tunnel in front.
 */
#ifndef PKV_TESTS_REDIS_SERVER_H
#define PKV_TESTS_REDIS_SERVER_H

#include <hiredis/hiredis.h>
#include <sys/types.h>

/* rs_start's result when redis-server is not installed: skip the test. */
#define RS_SKIP 77

#define RS_MAX_ARGS 16

typedef struct rs_server {
    pid_t pid;          /* 0: not running */
    int port;
    char dir[64];       /* its --dir, removed by rs_stop */
    char log[96];       /* its --logfile, in dir */
    char *extra[RS_MAX_ARGS + 1]; /* copied, for rs_restart */
    char password[64];  /* the default user's, "" for none: the helpers
                           send AUTH with it (rs_require_password) */
} rs_server;

/* The redis-server rs_start runs: $PKV_REDIS_SERVER or
 * /usr/bin/redis-server. */
const char *rs_binary(void);

/* 1 if rs_binary() can be run. */
int rs_available(void);

/* Start a server on a free port, with extra_args (NULL-terminated, or
 * NULL) after the others, e.g. {"--maxmemory", "1mb", NULL}. Returns 0
 * once it answers PING (within about 5 s), RS_SKIP when redis-server is
 * missing, -1 on failure (with a message on stderr). */
int rs_start(rs_server *rs, const char *const *extra_args);

/* SIGTERM (and SIGCONT, in case it is frozen), wait, remove the directory,
 * free the copied arguments. Safe after rs_kill and on a server never
 * started (zeroed). */
void rs_stop(rs_server *rs);

/* SIGKILL and wait: the port is free again, the directory stays. */
void rs_kill(rs_server *rs);

/* Start again on the same port and directory with the same arguments,
 * after rs_kill. 0 once it answers PING, -1 on failure. */
int rs_restart(rs_server *rs);

/* SIGSTOP: the server accepts connections (the kernel does) but never
 * answers, as a hung one. rs_continue: SIGCONT. */
void rs_stop_process(rs_server *rs);
void rs_continue(rs_server *rs);

/* CONFIG SET requirepass password: from now on the default user needs
 * it, and the helpers send it. 0, or -1. */
int rs_require_password(rs_server *rs, const char *password);

/* A redis-server that speaks TLS only on its TLS port, with a
 * self-signed certificate made for it (openssl req), and stunnel in client
 * mode on loopback verifying that certificate: a client speaks plain text
 * to tunnel_port, as pkv_redis.h's "TLS" says. The server's plain port
 * stays open for the helpers above (server). */
typedef struct rs_tls {
    rs_server server;
    int tls_port;
    int tunnel_port;
    pid_t tunnel; /* stunnel4, 0: not running */
    char dir[64]; /* the certificate, key, configuration and log */
} rs_tls;

/* Start both: 0 once the tunnel answers PING (within about 5 s); -1 on
 * failure, or when /usr/bin/stunnel4 or /usr/bin/openssl is missing (a
 * message on stderr: tests/deps.sh installs both, and a TLS test that
 * skipped would hide that CI never ran it). */
int rs_tls_start(rs_tls *t);

/* Stop the tunnel and the server; remove their files. */
void rs_tls_stop(rs_tls *t);

/* One command on a connection of its own (1 s timeout), as redisCommand:
 * the reply (free it with freeReplyObject), or NULL when the server did
 * not answer. */
redisReply *rs_command(const rs_server *rs, const char *fmt, ...);

#endif
