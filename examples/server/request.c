/* SPDX-License-Identifier: MIT */
/* A request body of the OpenAI API, read and checked (request.h). */
#include "request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INVALID "invalid_request_error"

int srv_error_set(srv_error *e, unsigned status, const char *type,
                  const char *code, const char *param, const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

char *srv_error_body(const srv_error *e)
{
    /* The message may quote a field name or a text cut inside a UTF-8
     * character: jansson refuses invalid UTF-8, so such a message is
     * replaced by a plain one. */
    json_t *message = json_string(e->message);
    if (message == NULL)
        message = json_string("the request is not valid");
    json_t *param = e->param[0] ? json_string(e->param) : NULL;
    json_t *body = json_pack(
        "{s:{s:o,s:s,s:o,s:o}}", "error", "message", message, "type",
        e->type, "param", param ? param : json_null(), "code",
        e->code ? json_string(e->code) : json_null());
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    return text;
}

void srv_request_free(srv_request *r)
{
    if (r->texts != NULL)
        for (uint32_t i = 0; i < r->num_messages; i++)
            free(r->texts[i]);
    free(r->texts);
    free(r->messages);
    free(r->prompt_ids);
    json_decref(r->root);
    memset(r, 0, sizeof *r);
}

static int bad(srv_error *e, const char *param, const char *what)
{
    return srv_error_set(e, 400, INVALID, NULL, param, "'%s': %s", param,
                         what);
}

/* A whole number in [lo, hi]. */
static int get_uint(json_t *v, const char *name, uint64_t lo, uint64_t hi,
                    uint64_t *out, srv_error *e)
{
    json_int_t i = json_integer_value(v);
    if (!json_is_integer(v) || i < 0 || (uint64_t)i < lo || (uint64_t)i > hi)
        return srv_error_set(e, 400, INVALID, NULL, name,
                             "'%s': expected a whole number from %llu to "
                             "%llu",
                             name, (unsigned long long)lo,
                             (unsigned long long)hi);
    *out = (uint64_t)i;
    return 0;
}

/* A number in [lo, hi] (lo_open: lo itself excluded). */
static int get_number(json_t *v, const char *name, double lo, int lo_open,
                      double hi, double *out, srv_error *e)
{
    double x = json_number_value(v);
    if (!json_is_number(v) || !isfinite(x) || x < lo || (lo_open && x == lo) ||
        x > hi)
        return srv_error_set(e, 400, INVALID, NULL, name,
                             "'%s': expected a number in %c%g, %g]", name,
                             lo_open ? '(' : '[', lo, hi);
    *out = x;
    return 0;
}

static int get_bool(json_t *v, const char *name, int *out, srv_error *e)
{
    if (!json_is_boolean(v))
        return bad(e, name, "expected true or false");
    *out = json_is_true(v);
    return 0;
}

/* stop: null, a string, or an array of at most SRV_MAX_STOPS strings,
 * each not empty and at most max_stop_len bytes. */
static int get_stops(srv_request *r, json_t *v, const srv_limits *l,
                     srv_error *e)
{
    if (json_is_null(v))
        return 0;
    size_t n = json_is_string(v) ? 1 : json_array_size(v);
    if ((!json_is_string(v) && !json_is_array(v)) || n > SRV_MAX_STOPS)
        return srv_error_set(e, 400, INVALID, NULL, "stop",
                             "'stop': expected a string or an array of at "
                             "most %d strings",
                             SRV_MAX_STOPS);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        size_t len = json_string_length(s);
        if (!json_is_string(s) || len == 0 || len > l->max_stop_len)
            return srv_error_set(e, 400, INVALID, NULL, "stop",
                                 "'stop': each a string of 1 to %zu bytes",
                                 l->max_stop_len);
        r->stops[r->num_stops] = json_string_value(s);
        r->stop_lens[r->num_stops++] = len;
    }
    return 0;
}

/* Token ids: an array of 1 .. max_prompt_ids whole numbers below the
 * vocabulary's size. */
static int get_ids(srv_request *r, json_t *v, const srv_limits *l,
                   srv_error *e)
{
    size_t n = json_array_size(v);
    if (n == 0 || n > l->max_prompt_ids)
        return srv_error_set(e, 400, INVALID, NULL, "prompt",
                             "'prompt': 1 to %u token ids",
                             l->max_prompt_ids);
    r->prompt_ids = malloc(n * sizeof *r->prompt_ids);
    if (r->prompt_ids == NULL)
        return srv_error_set(e, 500, "server_error", NULL, NULL,
                             "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *id = json_array_get(v, i);
        json_int_t k = json_integer_value(id);
        if (!json_is_integer(id) || k < 0 || k >= (json_int_t)l->vocab_size)
            return srv_error_set(e, 400, INVALID, NULL, "prompt",
                                 "'prompt': token ids from 0 to %u",
                                 l->vocab_size - 1);
        r->prompt_ids[i] = (int32_t)k;
    }
    r->num_prompt_ids = (uint32_t)n;
    return 0;
}

/* prompt: a string, an array of token ids, or an array holding one of
 * those (the API's batch of prompts, of one). */
static int get_prompt(srv_request *r, json_t *v, const srv_limits *l,
                      srv_error *e)
{
    if (json_is_array(v) && json_array_size(v) == 1 &&
        !json_is_integer(json_array_get(v, 0)))
        v = json_array_get(v, 0);
    if (json_is_string(v)) {
        r->prompt = json_string_value(v);
        r->prompt_len = json_string_length(v);
        if (r->prompt_len == 0)
            return bad(e, "prompt", "empty");
        return 0;
    }
    if (json_is_array(v))
        return get_ids(r, v, l, e);
    return bad(e, "prompt",
               "expected a string or an array of token ids (one prompt)");
}

/* A message's content: a string, or an array of {"type": "text", "text":
 * ...} parts, joined (owned in r->texts[i]). */
static int get_content(srv_request *r, uint32_t i, json_t *v, srv_error *e)
{
    gg_chat_message *m = &r->messages[i];
    if (json_is_string(v)) {
        m->text = json_string_value(v);
        m->len = json_string_length(v);
        return 0;
    }
    size_t n = json_array_size(v), len = 0;
    if (!json_is_array(v) || n == 0)
        return bad(e, "messages", "each content a string or text parts");
    for (size_t k = 0; k < n; k++) {
        json_t *part = json_array_get(v, k),
               *text = json_object_get(part, "text");
        if (!json_is_object(part) || json_object_size(part) != 2 ||
            !json_is_string(text) ||
            !json_is_string(json_object_get(part, "type")) ||
            strcmp(json_string_value(json_object_get(part, "type")),
                   "text") != 0)
            return bad(e, "messages",
                       "a content part is {\"type\": \"text\", \"text\": "
                       "...} (text only)");
        len += json_string_length(text);
    }
    char *joined = r->texts[i] = malloc(len + 1);
    if (joined == NULL)
        return srv_error_set(e, 500, "server_error", NULL, NULL,
                             "out of memory");
    len = 0;
    for (size_t k = 0; k < n; k++) {
        json_t *text = json_object_get(json_array_get(v, k), "text");
        memcpy(joined + len, json_string_value(text),
               json_string_length(text));
        len += json_string_length(text);
    }
    m->text = joined;
    m->len = len;
    return 0;
}

/* messages: 1 .. max_messages of {"role", "content"} ("name" allowed),
 * roles system (or developer), user and assistant. */
static int get_messages(srv_request *r, json_t *v, const srv_limits *l,
                        srv_error *e)
{
    static const char *const roles[] = {"system", "user", "assistant",
                                        "developer"};
    size_t n = json_array_size(v);
    if (!json_is_array(v) || n == 0 || n > l->max_messages)
        return srv_error_set(e, 400, INVALID, NULL, "messages",
                             "'messages': an array of 1 to %u messages",
                             l->max_messages);
    r->messages = calloc(n, sizeof *r->messages);
    r->texts = calloc(n, sizeof *r->texts);
    if (r->messages == NULL || r->texts == NULL)
        return srv_error_set(e, 500, "server_error", NULL, NULL,
                             "out of memory");
    r->num_messages = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(v, i), *role = json_object_get(m, "role");
        const char *key;
        json_t *field;
        if (!json_is_object(m) || !json_is_string(role))
            return bad(e, "messages", "each an object with a role");
        json_object_foreach(m, key, field) {
            if (strcmp(key, "role") != 0 && strcmp(key, "content") != 0 &&
                (strcmp(key, "name") != 0 || !json_is_string(field)))
                return srv_error_set(e, 400, INVALID, NULL, "messages",
                                     "'messages': unknown field '%s'", key);
        }
        int k = 0;
        while (k < 4 && strcmp(json_string_value(role), roles[k]) != 0)
            k++;
        if (k == 4)
            return bad(e, "messages",
                       "a role is system, developer, user or assistant");
        r->messages[i].role = k == 3 ? GG_ROLE_SYSTEM : k;
        if (get_content(r, (uint32_t)i, json_object_get(m, "content"), e))
            return -1;
    }
    return 0;
}

/* The fields of both kinds, each read by the one branch that names it. */
static int get_field(srv_request *r, const char *key, json_t *v,
                     const srv_limits *l, srv_error *e)
{
    uint64_t u = 0;
    if (strcmp(key, "model") == 0) {
        if (!json_is_string(v))
            return bad(e, key, "expected a string");
        if (strcmp(json_string_value(v), l->model) != 0)
            return srv_error_set(e, 404, INVALID, "model_not_found", key,
                                 "the model '%s' does not exist: this "
                                 "server serves '%s'",
                                 json_string_value(v), l->model);
    } else if (strcmp(key, "prompt") == 0 && r->kind == SRV_COMPLETION) {
        return get_prompt(r, v, l, e);
    } else if (strcmp(key, "messages") == 0 && r->kind == SRV_CHAT) {
        return get_messages(r, v, l, e);
    } else if (strcmp(key, "max_tokens") == 0 ||
               (strcmp(key, "max_completion_tokens") == 0 &&
                r->kind == SRV_CHAT)) {
        if (json_is_null(v))
            return 0;
        if (get_uint(v, key, 1, l->max_tokens, &u, e) != 0)
            return -1;
        r->max_tokens = (uint32_t)u;
    } else if (strcmp(key, "temperature") == 0) {
        return json_is_null(v) ? 0
                               : get_number(v, key, 0, 0, 2, &r->temperature,
                                            e);
    } else if (strcmp(key, "top_p") == 0) {
        return json_is_null(v) ? 0
                               : get_number(v, key, 0, 1, 1, &r->top_p, e);
    } else if (strcmp(key, "seed") == 0) {
        if (json_is_null(v))
            return 0;
        if (!json_is_integer(v))
            return bad(e, key, "expected a whole number");
        r->seed = (uint64_t)json_integer_value(v);
        r->seed_given = 1;
    } else if (strcmp(key, "stream") == 0) {
        return json_is_null(v) ? 0 : get_bool(v, key, &r->stream, e);
    } else if (strcmp(key, "stream_options") == 0) {
        json_t *usage = json_object_get(v, "include_usage");
        if (json_is_null(v))
            return 0;
        if (!json_is_object(v) || json_object_size(v) != (usage != NULL))
            return bad(e, key, "expected {\"include_usage\": true|false}");
        return usage ? get_bool(usage, key, &r->include_usage, e) : 0;
    } else if (strcmp(key, "stop") == 0) {
        return get_stops(r, v, l, e);
    } else if (strcmp(key, "ignore_eos") == 0) {
        return json_is_null(v) ? 0 : get_bool(v, key, &r->ignore_eos, e);
    } else if (strcmp(key, "n") == 0) {
        if (!json_is_null(v) && get_uint(v, key, 1, 1, &u, e) != 0)
            return -1;
    } else if (strcmp(key, "user") == 0) {
        if (!json_is_string(v))
            return bad(e, key, "expected a string");
    } else {
        return srv_error_set(e, 400, INVALID, "unknown_field", key,
                             "unknown or unsupported field '%s'", key);
    }
    return 0;
}

int srv_request_parse(int kind, const char *body, size_t len,
                      const srv_limits *limits, srv_request *out,
                      srv_error *e)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->temperature = 1;
    out->top_p = 1;
    json_error_t je;
    /* Duplicate keys refused: which one counts would be a guess. */
    out->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (out->root == NULL) {
        srv_error_set(e, 400, INVALID, "invalid_json", NULL,
                      "the body is not valid JSON: %s (byte %d)", je.text,
                      je.position);
        srv_request_free(out);
        return -1;
    }
    const char *key;
    json_t *v;
    int rc = json_is_object(out->root)
                 ? 0
                 : bad(e, "body", "expected a JSON object");
    if (rc == 0) {
        json_object_foreach(out->root, key, v) {
            if ((rc = get_field(out, key, v, limits, e)) != 0)
                break;
        }
    }
    const char *need = kind == SRV_CHAT ? "messages" : "prompt";
    if (rc == 0 && json_object_get(out->root, "model") == NULL)
        rc = bad(e, "model", "required");
    else if (rc == 0 && json_object_get(out->root, need) == NULL)
        rc = bad(e, need, "required");
    if (rc != 0)
        srv_request_free(out);
    return rc;
}
