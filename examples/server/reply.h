/* SPDX-License-Identifier: MIT */
/*
 * pkv-server's answers as OpenAI's API writes them: a whole completion or
 * chat completion, the events of a stream (server-sent events, "data:
 * {chunk}" each, "data: [DONE]" last), the model list, and /metrics in
 * Prometheus' text format. The answer's text is the model's bytes, which
 * may hold invalid UTF-8 (a byte-level token alone): each such byte is
 * written as U+FFFD, so that every body is valid JSON.
 */
#ifndef PKV_SERVER_REPLY_H
#define PKV_SERVER_REPLY_H

#include "job.h"
#include "server.h"

/* The body of an ended job (not SRV_END_ERROR), under its lock;
 * NUL-terminated, for the caller to free; NULL out of memory. */
char *srv_reply_body(const srv_job *j, const char *model);

/* Under the job's lock, with its out buffer all sent: the stream's next
 * events into j->out (the first delta, the text not yet sent, and once
 * the job ended its last chunk, its usage when asked for and [DONE], or
 * its error and [DONE]). 0 (maybe nothing new), or -1 out of memory. */
int srv_reply_stream(srv_job *j, const char *model);

/* GET /v1/models: the one model. Freed by the caller; NULL out of
 * memory. */
char *srv_reply_models(const srv_server *s);

/* GET /metrics, from the figures the loop last published. Freed by the
 * caller; NULL out of memory. */
char *srv_reply_metrics(srv_server *s);

#endif
