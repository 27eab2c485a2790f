/* SPDX-License-Identifier: MIT */
/* pkv-server's answers (reply.h). */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include "reply.h"

#include "text.h"

#include <jansson.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const outcome_names[SRV_OUTCOMES] = {
    "stop", "length", "cancelled", "timeout", "error"};

/* text[0, n) as a JSON string, each byte of invalid UTF-8 as U+FFFD. */
static json_t *text_json(const char *text, size_t n)
{
    char *clean = malloc(3 * n + 1);
    if (clean == NULL)
        return NULL;
    size_t len = 0;
    for (size_t i = 0; i < n;) {
        uint32_t k = gg_utf8_len(text + i, n - i);
        if (k == 0) {
            memcpy(clean + len, GG_REPLACEMENT, GG_REPLACEMENT_LEN);
            len += GG_REPLACEMENT_LEN;
            i++;
        } else {
            memcpy(clean + len, text + i, k);
            len += k;
            i += k;
        }
    }
    json_t *s = json_stringn(clean, len);
    free(clean);
    return s;
}

static json_t *usage(const srv_job *j)
{
    return json_pack("{s:I,s:I,s:I}", "prompt_tokens",
                     (json_int_t)j->prompt_len, "completion_tokens",
                     (json_int_t)j->generated, "total_tokens",
                     (json_int_t)j->prompt_len + (json_int_t)j->generated);
}

static const char *finish_reason(const srv_job *j)
{
    return j->end == SRV_END_LENGTH ? "length" : "stop";
}

/* The frame every answer and chunk shares: id, object, created, model,
 * and choices (a new reference given). NULL out of memory. */
static json_t *frame(const srv_job *j, const char *model, const char *object,
                     json_t *choices)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:o}", "id", j->id, "object", object,
                     "created", (json_int_t)j->created, "model", model,
                     "choices", choices);
}

/* One choice: a completion's text or a chat's message or delta (given),
 * and its finish reason (NULL: null). */
static json_t *choice(const srv_job *j, json_t *content, int delta,
                      const char *reason)
{
    json_t *r = reason ? json_string(reason) : json_null();
    if (j->kind == SRV_COMPLETION)
        return json_pack("{s:i,s:o,s:o,s:n}", "index", 0, "text", content,
                         "finish_reason", r, "logprobs");
    return json_pack("{s:i,s:o,s:o,s:n}", "index", 0,
                     delta ? "delta" : "message", content, "finish_reason",
                     r, "logprobs");
}

/* The content of a choice from text (a new reference given): a
 * completion's string, a chat's {"role", "content"} or delta. */
static json_t *content(const srv_job *j, json_t *text, int with_role)
{
    if (text == NULL)
        return NULL;
    if (j->kind == SRV_COMPLETION)
        return text;
    if (with_role)
        return json_pack("{s:s,s:o}", "role", "assistant", "content", text);
    return json_pack("{s:o}", "content", text);
}

static char *dump(json_t *v)
{
    char *s = v ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    return s;
}

char *srv_reply_body(const srv_job *j, const char *model)
{
    json_t *c = choice(j, content(j, text_json(j->text, j->len), 1), 0,
                       finish_reason(j));
    json_t *body = frame(j, model,
                         j->kind == SRV_CHAT ? "chat.completion"
                                             : "text_completion",
                         json_pack("[o]", c));
    if (body != NULL && json_object_set_new(body, "usage", usage(j)) != 0) {
        json_decref(body);
        body = NULL;
    }
    return dump(body);
}

/* Append bytes[0, n) to the job's out buffer, a byte range with no
 * terminator. 0, or -1 out of memory. */
static int put_bytes(srv_job *j, const char *bytes, size_t n)
{
    if (n > j->out_cap - j->out_len) {
        size_t cap = 2 * (j->out_len + n);
        char *grown = realloc(j->out, cap);
        if (grown == NULL)
            return -1;
        j->out = grown;
        j->out_cap = cap;
    }
    memcpy(j->out + j->out_len, bytes, n);
    j->out_len += n;
    return 0;
}

/* Append "data: {v}\n\n" to the job's out buffer (v's reference taken). */
static int put_event(srv_job *j, json_t *v)
{
    char *s = dump(v);
    if (s == NULL)
        return -1;
    int rc = 0;
    if (put_bytes(j, "data: ", 6) != 0 || put_bytes(j, s, strlen(s)) != 0 ||
        put_bytes(j, "\n\n", 2) != 0)
        rc = -1;
    free(s);
    return rc;
}

/* A chunk of the stream: one choice (a new reference), usage null where
 * the client asked for usage. */
static int put_chunk(srv_job *j, const char *model, json_t *c)
{
    json_t *chunk = frame(j, model,
                          j->kind == SRV_CHAT ? "chat.completion.chunk"
                                              : "text_completion",
                          c ? json_pack("[o]", c) : json_array());
    if (chunk != NULL && j->include_usage &&
        json_object_set_new(chunk, "usage", json_null()) != 0) {
        json_decref(chunk);
        chunk = NULL;
    }
    return put_event(j, chunk);
}

static int put_tail(srv_job *j, const char *model)
{
    if (j->end == SRV_END_ERROR) {
        char *e = srv_error_body(&j->error);
        if (e == NULL || put_event(j, json_loads(e, 0, NULL)) != 0) {
            free(e);
            return -1;
        }
        free(e);
    } else {
        json_t *empty = j->kind == SRV_CHAT ? json_object() : json_string("");
        if (put_chunk(j, model, choice(j, empty, 1, finish_reason(j))) != 0)
            return -1;
        if (j->include_usage) {
            json_t *last = frame(j, model,
                                 j->kind == SRV_CHAT ? "chat.completion.chunk"
                                                     : "text_completion",
                                 json_array());
            if (last == NULL ||
                json_object_set_new(last, "usage", usage(j)) != 0 ||
                put_event(j, json_incref(last)) != 0) {
                json_decref(last);
                return -1;
            }
            json_decref(last);
        }
    }
    static const char done[] = "data: [DONE]\n\n";
    if (put_bytes(j, done, sizeof done - 1) != 0)
        return -1;
    j->tail_sent = 1;
    return 0;
}

int srv_reply_stream(srv_job *j, const char *model)
{
    if (j->kind == SRV_CHAT && !j->role_sent) {
        if (put_chunk(j, model,
                      choice(j, content(j, json_string(""), 1), 1, NULL)))
            return -1;
        j->role_sent = 1;
    }
    if (j->ready > j->text_sent) {
        json_t *text = text_json(j->text + j->text_sent,
                                 j->ready - j->text_sent);
        if (put_chunk(j, model, choice(j, content(j, text, 0), 1, NULL)))
            return -1;
        j->text_sent = j->ready;
    }
    if (j->end != SRV_END_NONE && !j->tail_sent)
        return put_tail(j, model);
    return 0;
}

char *srv_reply_models(const srv_server *s)
{
    return dump(json_pack("{s:s,s:[{s:s,s:s,s:I,s:s,s:I}]}", "object",
                          "list", "data", "id", s->model_name, "object",
                          "model", "created", (json_int_t)s->started,
                          "owned_by", "pkv", "max_model_len",
                          (json_int_t)s->ctx));
}

/* One metric: its HELP and TYPE lines, then its value. */
static void metric(FILE *f, const char *name, const char *type,
                   const char *help, double value)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name,
            type, name, value);
}

char *srv_reply_metrics(srv_server *s)
{
    pthread_mutex_lock(&s->lock);
    srv_figures g = s->figures;
    uint32_t in_flight = s->num_jobs;
    pthread_mutex_unlock(&s->lock);
    const pkv_engine_stats *st = &g.engine;
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (f == NULL)
        return NULL;
    metric(f, "pkv_requests_running", "gauge",
           "Sequences running in the engine.", st->num_running);
    metric(f, "pkv_requests_waiting", "gauge",
           "Requests waiting: queued for the engine or waiting in it.",
           (double)st->num_waiting + g.queued);
    metric(f, "pkv_requests_swapped", "gauge",
           "Sequences swapped out to host memory.", st->num_swapped);
    metric(f, "pkv_requests_in_flight", "gauge",
           "Requests accepted and not yet ended.", in_flight);
    metric(f, "pkv_kv_usage_ratio", "gauge",
           "KV blocks in use (the null block excluded) over all blocks.",
           st->blocks_total > 1 ? (double)(st->blocks_used - 1) /
                                      (double)(st->blocks_total - 1)
                                : 0.0);
    metric(f, "pkv_kv_blocks_total", "gauge", "KV blocks of the pool.",
           (double)st->blocks_total);
    metric(f, "pkv_kv_blocks_cached", "gauge",
           "Free KV blocks that hold a cached prefix.",
           (double)st->blocks_cached_free);
    metric(f, "pkv_kv_tokens_stored", "gauge",
           "Tokens held by the KV blocks in use.",
           (double)st->tokens_stored);
    metric(f, "pkv_prefix_query_tokens_total", "counter",
           "Prompt tokens looked up in the prefix cache.",
           (double)st->prefix_query_tokens);
    metric(f, "pkv_prefix_hit_tokens_total", "counter",
           "Prompt tokens found in the prefix cache.",
           (double)st->prefix_hit_tokens);
    metric(f, "pkv_prompt_tokens_total", "counter",
           "Prompt tokens of the requests added.", (double)g.prompt_tokens);
    metric(f, "pkv_generation_tokens_total", "counter", "Tokens sampled.",
           (double)g.generated_tokens);
    metric(f, "pkv_generation_tokens_per_second", "gauge",
           "Tokens sampled a second, over the last second or more.",
           g.tokens_per_s);
    metric(f, "pkv_preemptions_total", "counter",
           "Sequences preempted (recompute or swap).",
           (double)st->preemptions);
    metric(f, "pkv_steps_total", "counter", "Engine steps.",
           (double)st->steps);
    metric(f, "pkv_requests_rejected_total", "counter",
           "Requests refused before the engine (bad request, limits).",
           (double)g.rejected);
    metric(f, "pkv_lookups_total", "counter",
           "Prefix lookups answered (POST /pkv/lookup/...).",
           (double)g.lookups);
    metric(f, "pkv_lookup_store_failures_total", "counter",
           "Prefix lookups whose store could not be asked "
           "(store_tokens null).",
           (double)g.lookup_store_failures);
    fprintf(f, "# HELP pkv_requests_finished_total Requests ended, by "
               "reason.\n# TYPE pkv_requests_finished_total counter\n");
    for (int k = 0; k < SRV_OUTCOMES; k++)
        fprintf(f, "pkv_requests_finished_total{reason=\"%s\"} %llu\n",
                outcome_names[k], (unsigned long long)g.finished[k]);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}
