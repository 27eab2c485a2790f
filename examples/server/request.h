/* SPDX-License-Identifier: MIT */
/*
 * A request body of the OpenAI API, read and checked: what
 * /v1/completions or /v1/chat/completions asks for, or the error to
 * answer with, in the API's shape. Bytes from the network: every field is
 * checked against the server's limits, a field the server does not know
 * is an error (a typo must not pass as a default), and nothing here needs
 * the model, so that the fuzzer (tests/fuzz/fuzz_request.c) runs it alone.
 */
#ifndef PKV_SERVER_REQUEST_H
#define PKV_SERVER_REQUEST_H

#include "chat.h"

#include <jansson.h>

#include <stddef.h>
#include <stdint.h>

enum { SRV_COMPLETION, SRV_CHAT };

/* The most stop strings a request gives, as OpenAI's API allows. */
#define SRV_MAX_STOPS 4

/* What the server takes. */
typedef struct srv_limits {
    uint32_t max_tokens;     /* max_tokens at most */
    uint32_t max_prompt_ids; /* a prompt given as token ids: at most */
    uint32_t max_messages;
    size_t max_stop_len; /* bytes of a stop string */
    uint32_t vocab_size; /* token ids below it */
    const char *model;   /* the one model served: "model" must name it */
} srv_limits;

/* The request. Its texts point into root, which it owns. */
typedef struct srv_request {
    int kind; /* SRV_COMPLETION, SRV_CHAT */
    json_t *root;
    /* A completion's prompt: a text, or token ids (prompt_ids not NULL,
     * owned). */
    const char *prompt;
    size_t prompt_len;
    int32_t *prompt_ids;
    uint32_t num_prompt_ids;
    /* A chat's messages (owned; their texts in root, or in texts, the
     * owned joins of content parts). */
    gg_chat_message *messages;
    uint32_t num_messages;
    char **texts;
    uint32_t max_tokens; /* 0: not given */
    double temperature;  /* 1 unless given, as OpenAI's */
    double top_p;        /* 1 unless given */
    uint64_t seed;
    int seed_given;
    int stream;
    int include_usage; /* stream_options.include_usage */
    int ignore_eos;    /* vLLM's and llama-server's extension */
    const char *stops[SRV_MAX_STOPS];
    size_t stop_lens[SRV_MAX_STOPS];
    uint32_t num_stops;
} srv_request;

/* An error as OpenAI's API answers it: the HTTP status, then the body's
 * {"error": {"message", "type", "param", "code"}} (param and code NULL:
 * null). */
typedef struct srv_error {
    unsigned status;
    const char *type;
    const char *code;
    char param[64];
    char message[256];
} srv_error;

/* Fill *e (printf-style message) and return -1. */
int srv_error_set(srv_error *e, unsigned status, const char *type,
                  const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* The error's body, NUL-terminated, for the caller to free; NULL out of
 * memory. */
char *srv_error_body(const srv_error *e);

/* Read body[0, len) as a request of kind. 0 with *out filled (free it
 * with srv_request_free), or -1 with *e filled (4xx) and *out empty. */
int srv_request_parse(int kind, const char *body, size_t len,
                      const srv_limits *limits, srv_request *out,
                      srv_error *e);

/* Free what *r owns (an empty or zeroed one too). */
void srv_request_free(srv_request *r);

#endif
