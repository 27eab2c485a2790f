/* SPDX-License-Identifier: MIT */
/* A private redis-server for tests (redis_server.h). */
#define _GNU_SOURCE /* mkdtemp, kill, prctl */
#include "redis_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#define RS_WAIT_MS 5000

const char *rs_binary(void)
{
    const char *env = getenv("PKV_REDIS_SERVER");
    return env != NULL && env[0] != '\0' ? env : "/usr/bin/redis-server";
}

int rs_available(void)
{
    return access(rs_binary(), X_OK) == 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* A connection to rs, authenticated when rs has a password, or NULL. */
static redisContext *connect_to(const rs_server *rs, long timeout_ms)
{
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", rs->port, tv);
    if (c != NULL && (c->err != 0 || redisSetTimeout(c, tv) != REDIS_OK)) {
        redisFree(c);
        return NULL;
    }
    if (c != NULL && rs->password[0] != '\0') {
        redisReply *r = redisCommand(c, "AUTH %s", rs->password);
        int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
        if (r != NULL)
            freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

/* 1 if the server on rs->port is rs->pid (not another test's). */
static int answers(const rs_server *rs)
{
    redisContext *c = connect_to(rs, 500);
    if (c == NULL)
        return 0;
    redisReply *r = redisCommand(c, "INFO server");
    char want[48];
    snprintf(want, sizeof want, "process_id:%ld\r", (long)rs->pid);
    int ok = r != NULL && r->type == REDIS_REPLY_STRING &&
             strstr(r->str, want) != NULL;
    if (r != NULL)
        freeReplyObject(r);
    redisFree(c);
    return ok;
}

/* The child's part of launch: only async-signal-safe calls (the test may
 * have threads). */
static void exec_server(const char *const *argv)
{
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
#if defined(__linux__)
    /* The server dies with the test, even when the test crashes. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
    execv(argv[0], (char *const *)argv);
    _exit(127);
}

/* Run the server on rs->port; 0 once it answers, -1 if it exited (the
 * port was taken) or did not answer in time. */
static int launch(rs_server *rs)
{
    char port[16];
    snprintf(port, sizeof port, "%d", rs->port);
    const char *argv[32 + RS_MAX_ARGS];
    int n = 0;
    argv[n++] = rs_binary();
    const char *fixed[] = {"--save", "", "--appendonly", "no",
                           "--daemonize", "no", "--port", port,
                           "--bind", "127.0.0.1", "--dir", rs->dir,
                           "--logfile", rs->log};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        argv[n++] = fixed[i];
    for (int i = 0; rs->extra[i] != NULL; i++)
        argv[n++] = rs->extra[i];
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0)
        exec_server(argv);
    rs->pid = pid;
    for (int waited = 0; waited < RS_WAIT_MS; waited += 10) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            rs->pid = 0;
            return -1;
        }
        if (answers(rs))
            return 0;
        sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    rs->pid = 0;
    return -1;
}

static void print_log(const rs_server *rs)
{
    FILE *f = fopen(rs->log, "r");
    if (f == NULL)
        return;
    char line[256];
    while (fgets(line, sizeof line, f) != NULL)
        fprintf(stderr, "redis-server: %s", line);
    fclose(f);
}

int rs_start(rs_server *rs, const char *const *extra_args)
{
    memset(rs, 0, sizeof *rs);
    if (!rs_available())
        return RS_SKIP;
    snprintf(rs->dir, sizeof rs->dir, "/tmp/pkv-redis-XXXXXX");
    if (mkdtemp(rs->dir) == NULL) {
        perror("rs_start: mkdtemp");
        return -1;
    }
    snprintf(rs->log, sizeof rs->log, "%s/redis.log", rs->dir);
    for (int i = 0; extra_args != NULL && extra_args[i] != NULL; i++) {
        if (i == RS_MAX_ARGS) {
            fprintf(stderr, "rs_start: more than %d arguments\n",
                    RS_MAX_ARGS);
            rs_stop(rs);
            return -1;
        }
        rs->extra[i] = strdup(extra_args[i]);
    }
    /* Attempts count on across calls, so that a second server of this
     * process does not try the first one's port first. */
    static int attempt;
    for (int tries = 0; tries < 20; tries++, attempt++) {
        rs->port = 20000 + (int)(((long)getpid() * 7 + attempt) % 30000);
        if (launch(rs) == 0) {
            attempt++;
            return 0;
        }
    }
    fprintf(stderr, "rs_start: %s did not start\n", rs_binary());
    print_log(rs);
    rs_stop(rs);
    return -1;
}

int rs_restart(rs_server *rs)
{
    /* The port was ours a moment ago; another test may take it, or the
     * kernel hold it briefly: a few tries. */
    for (int attempt = 0; attempt < 10; attempt++) {
        if (launch(rs) == 0)
            return 0;
        sleep_ms(100);
    }
    fprintf(stderr, "rs_restart: no server on port %d\n", rs->port);
    print_log(rs);
    return -1;
}

static void end_process(rs_server *rs, int sig)
{
    if (rs->pid <= 0)
        return;
    kill(rs->pid, sig);
    kill(rs->pid, SIGCONT);
    waitpid(rs->pid, NULL, 0);
    rs->pid = 0;
}

/* The server's directory and its files (log, a Unix socket). */
static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            char path[384];
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

void rs_kill(rs_server *rs)
{
    end_process(rs, SIGKILL);
}

void rs_stop(rs_server *rs)
{
    end_process(rs, SIGTERM);
    if (rs->dir[0] != '\0') {
        remove_dir(rs->dir);
        rs->dir[0] = '\0';
    }
    for (int i = 0; i < RS_MAX_ARGS; i++) {
        free(rs->extra[i]);
        rs->extra[i] = NULL;
    }
}

void rs_stop_process(rs_server *rs)
{
    if (rs->pid > 0)
        kill(rs->pid, SIGSTOP);
}

void rs_continue(rs_server *rs)
{
    if (rs->pid > 0)
        kill(rs->pid, SIGCONT);
}

redisReply *rs_command(const rs_server *rs, const char *fmt, ...)
{
    redisContext *c = connect_to(rs, 1000);
    if (c == NULL)
        return NULL;
    va_list args;
    va_start(args, fmt);
    redisReply *r = redisvCommand(c, fmt, args);
    va_end(args);
    redisFree(c);
    return r;
}

int rs_require_password(rs_server *rs, const char *password)
{
    if (strlen(password) >= sizeof rs->password)
        return -1;
    redisReply *r = rs_command(rs, "CONFIG SET requirepass %s", password);
    int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
    if (r != NULL)
        freeReplyObject(r);
    if (ok)
        snprintf(rs->password, sizeof rs->password, "%s", password);
    return ok ? 0 : -1;
}

/* A loopback port nobody listens on now, or -1. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = bind(fd, (struct sockaddr *)&a, len) == 0 &&
                       getsockname(fd, (struct sockaddr *)&a, &len) == 0
                   ? ntohs(a.sin_port)
                   : -1;
    close(fd);
    return port;
}

/* stunnel4 on conf, in the foreground, its banner silenced; it dies with
 * the thread that started it. The child's part: async-signal-safe. */
static pid_t start_tunnel(const char *conf)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    int quiet = open("/dev/null", O_WRONLY);
    if (quiet >= 0)
        dup2(quiet, 2);
#if defined(__linux__)
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
    execl("/usr/bin/stunnel4", "stunnel4", conf, (char *)NULL);
    _exit(127);
}

int rs_tls_start(rs_tls *t)
{
    memset(t, 0, sizeof *t);
    if (access("/usr/bin/stunnel4", X_OK) != 0 ||
        access("/usr/bin/openssl", X_OK) != 0) {
        fprintf(stderr, "rs_tls_start: /usr/bin/stunnel4 or /usr/bin/openssl "
                        "is missing (sh tests/deps.sh installs them)\n");
        return -1;
    }
    snprintf(t->dir, sizeof t->dir, "/tmp/pkv-tls-XXXXXX");
    if (mkdtemp(t->dir) == NULL) {
        perror("rs_tls_start: mkdtemp");
        return -1;
    }
    char cmd[600], cert[96], key[96], conf[96], log[96];
    snprintf(cert, sizeof cert, "%s/cert.pem", t->dir);
    snprintf(key, sizeof key, "%s/key.pem", t->dir);
    snprintf(conf, sizeof conf, "%s/stunnel.conf", t->dir);
    snprintf(log, sizeof log, "%s/stunnel.log", t->dir);
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey ec -pkeyopt "
             "ec_paramgen_curve:prime256v1 -nodes -keyout %s -out %s "
             "-days 1 -subj /CN=localhost >/dev/null 2>&1",
             key, cert);
    t->tls_port = free_port();
    t->tunnel_port = free_port();
    char tls_port[16];
    snprintf(tls_port, sizeof tls_port, "%d", t->tls_port);
    const char *args[] = {"--tls-port", tls_port, "--tls-cert-file", cert,
                          "--tls-key-file", key, "--tls-ca-cert-file", cert,
                          "--tls-auth-clients", "no", NULL};
    FILE *f = NULL;
    if (t->tls_port < 0 || t->tunnel_port < 0 || system(cmd) != 0 ||
        rs_start(&t->server, args) != 0 || (f = fopen(conf, "w")) == NULL) {
        fprintf(stderr, "rs_tls_start: no certificate, server or "
                        "configuration\n");
        rs_tls_stop(t);
        return -1;
    }
    fprintf(f, "foreground = yes\npid =\noutput = %s\n[redis]\n"
               "client = yes\naccept = 127.0.0.1:%d\n"
               "connect = 127.0.0.1:%d\nverifyPeer = yes\nCAfile = %s\n"
               "checkHost = localhost\n",
            log, t->tunnel_port, t->tls_port, cert);
    if (fclose(f) != 0 || (t->tunnel = start_tunnel(conf)) < 0) {
        t->tunnel = 0;
        rs_tls_stop(t);
        return -1;
    }
    /* Through the tunnel, authenticated as the helpers are. */
    rs_server via = t->server;
    via.port = t->tunnel_port;
    for (int waited = 0; waited < RS_WAIT_MS; waited += 10) {
        redisReply *r = rs_command(&via, "PING");
        if (r != NULL) {
            freeReplyObject(r);
            return 0;
        }
        sleep_ms(10);
    }
    fprintf(stderr, "rs_tls_start: the tunnel did not answer\n");
    rs_tls_stop(t);
    return -1;
}

void rs_tls_stop(rs_tls *t)
{
    if (t->tunnel > 0) {
        kill(t->tunnel, SIGTERM);
        waitpid(t->tunnel, NULL, 0);
        t->tunnel = 0;
    }
    rs_stop(&t->server);
    if (t->dir[0] != '\0') {
        remove_dir(t->dir);
        t->dir[0] = '\0';
    }
}
