/* SPDX-License-Identifier: MIT */
/*
 * A request in flight, shared by the two sides of the server
 * (docs/design.md, "The server's threads"): the HTTP side (libmicrohttpd's
 * thread, which reads the request and writes the response) and the step
 * loop (the one thread that calls pkv). The loop appends the answer's
 * text and ends the job; the HTTP side reads the text, and cancels a job
 * whose client went away. Both under the job's lock; a reference count
 * frees the job when the last side lets go.
 *
 * Waking the HTTP side: a connection with nothing to send is suspended
 * (libmicrohttpd stops polling it); the loop resumes it when there is
 * text (a stream) or the job ended. A suspended connection is never
 * closed under the loop (libmicrohttpd does not see a client leave while
 * it is suspended), so the loop may resume it as long as the job says it
 * is suspended.
 */
#ifndef PKV_SERVER_JOB_H
#define PKV_SERVER_JOB_H

#include "request.h"

#include <pkv/pkv.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct MHD_Connection;

/* How a job ended. */
enum {
    SRV_END_NONE,    /* not yet */
    SRV_END_STOP,    /* an end of turn, end of text or stop string */
    SRV_END_LENGTH,  /* max_tokens */
    SRV_END_ERROR    /* the error in the job's error */
};

typedef struct srv_job {
    pthread_mutex_t lock;
    int refs;
    /* Set before the loop sees the job, then only read. */
    int kind; /* SRV_COMPLETION, SRV_CHAT */
    int stream, include_usage;
    int ignore_eos; /* end-of-text and end-of-turn never sampled */
    char id[48];
    long long created; /* Unix seconds */
    int32_t *prompt;
    uint32_t prompt_len;
    uint32_t max_tokens;
    float temperature, top_p;
    uint64_t rng;
    char *stops[SRV_MAX_STOPS];
    size_t stop_lens[SRV_MAX_STOPS];
    uint32_t num_stops;
    double deadline; /* host_now_s() past which the loop ends it */
    const char *model; /* the served model's name, for the answers */
    /* The loop writes these, under lock. text[0, ready) may be sent:
     * the rest may yet turn into a stop string or is a UTF-8 character
     * not yet whole. */
    char *text;
    size_t len, cap, ready;
    uint32_t generated;
    int end; /* SRV_END_* */
    srv_error error;
    /* The HTTP side writes these, under lock. */
    int cancelled; /* the client went away: the loop aborts the sequence */
    struct MHD_Connection *conn; /* until the request is over */
    int suspended;
    /* The loop's own. */
    pkv_seq_id seq;
    int aborted;   /* pkv_seq_abort called */
    int uncounted; /* no longer in the server's num_jobs */
    struct srv_job *next; /* in the server's inbox, then the loop's list */
    /* The HTTP side's own: the body as it arrives, then the stream. */
    char *body;
    size_t body_len;
    int body_too_large;
    int lookup; /* a prefix lookup (lookup.h): answered here, never
                   queued */
    int queued; /* handed to the loop */
    size_t text_sent;
    int role_sent, tail_sent; /* a chat stream's first delta; the end */
    char *out; /* formatted stream bytes, out[out_sent, out_len) unsent */
    size_t out_len, out_cap, out_sent;
} srv_job;

/* A new job with one reference; NULL out of memory. */
srv_job *srv_job_new(void);
void srv_job_ref(srv_job *j);
void srv_job_unref(srv_job *j);

/* The loop: the text of a sampled token. Under the job's lock: appended,
 * then cut at a stop string if one now appears (1 is returned: the job
 * must stop; its end is the caller's to set), and a stream woken. 0, 1,
 * or -1 out of memory. */
int srv_job_append(srv_job *j, const char *bytes, size_t n);

/* The loop: end the job (once; a later call does nothing), waking its
 * connection. error is NULL unless end is SRV_END_ERROR. */
void srv_job_end(srv_job *j, int end, const srv_error *error);

/* The HTTP side, under the job's lock, in a libmicrohttpd callback of its
 * connection (j->conn): nothing to answer yet, so suspend the connection
 * until the loop wakes it. */
void srv_job_suspend(srv_job *j);

#endif
