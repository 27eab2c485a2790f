/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for pkv-server's request parser (examples/server/request.c:
 * srv_request_parse), the first code that reads a body from the network.
 *
 * The first input byte picks the endpoint (bit 0: completions or chat)
 * and whether the rest is the body itself or (bit 1) indexes into a table
 * of JSON fragments (the fields, roles, values at and past each limit,
 * nesting, invalid UTF-8) that random bytes rarely spell; bits 2-3 pick
 * the limits (tight or loose).
 *
 * Checked: no read or write outside the buffers (ASan), no leak
 * (LeakSanitizer); a request accepted holds only what the limits allow
 * (max_tokens, stop strings and their lengths, token ids below the
 * vocabulary and no more than allowed, 1 .. max_messages messages with
 * known roles, temperature in [0, 2], top_p in (0, 1]) and its texts can
 * be read whole; a request refused has a 4xx status (500 only out of
 * memory), a type and a message, and its error body is JSON in OpenAI's
 * shape, {"error": {"message", "type", "param", "code"}}.
 */
#include "fuzz_request.h"
#include "fuzz_check.h"

#include "request.h"

#include <jansson.h>

#include <stdlib.h>
#include <string.h>

uint64_t pkv_fuzz_ops;

static const char *const fragments[] = {
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"model\"",
    "\"m\"",
    "\"other\"",
    "\"prompt\"",
    "\"messages\"",
    "\"role\"",
    "\"content\"",
    "\"name\"",
    "\"system\"",
    "\"user\"",
    "\"assistant\"",
    "\"developer\"",
    "\"type\"",
    "\"text\"",
    "\"max_tokens\"",
    "\"max_completion_tokens\"",
    "\"temperature\"",
    "\"top_p\"",
    "\"seed\"",
    "\"stream\"",
    "\"stream_options\"",
    "\"include_usage\"",
    "\"stop\"",
    "\"n\"",
    "\"user\"",
    "\"logprobs\"",
    "true",
    "false",
    "null",
    "0",
    "1",
    "2",
    "-1",
    "16",
    "17",
    "255",
    "256",
    "1e308",
    "-0.0",
    "0.5",
    "2.0000001",
    "9223372036854775807",
    "18446744073709551616",
    "\"\"",
    "\"hi\"",
    "\"\\u00e9\"",
    "\"\\ud800\"",
    "\"\\u0000\"",
    "\"\xc3\"",
    "\"\xe2\x82\xac\"",
    "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"",
    "{\"type\":\"text\",\"text\":\"x\"}",
    "{\"type\":\"image_url\",\"image_url\":{}}",
    "{\"role\":\"user\",\"content\":\"hi\"}",
    "[1,2,3]",
    "[[1]]",
    "[\"a\",\"b\",\"c\",\"d\",\"e\"]",
    " ",
};

enum { NUM_FRAGMENTS = sizeof fragments / sizeof *fragments };

static void check_accepted(const srv_request *r, const srv_limits *l)
{
    CHECK(r->root != NULL);
    CHECK(r->max_tokens <= l->max_tokens);
    CHECK(r->temperature >= 0 && r->temperature <= 2);
    CHECK(r->top_p > 0 && r->top_p <= 1);
    CHECK(r->num_stops <= SRV_MAX_STOPS);
    size_t sum = 0;
    for (uint32_t i = 0; i < r->num_stops; i++) {
        CHECK(r->stop_lens[i] >= 1 && r->stop_lens[i] <= l->max_stop_len);
        for (size_t k = 0; k < r->stop_lens[i]; k++)
            sum += (unsigned char)r->stops[i][k];
    }
    if (r->kind == SRV_COMPLETION) {
        CHECK(r->messages == NULL);
        CHECK((r->prompt != NULL) != (r->prompt_ids != NULL));
        if (r->prompt != NULL) {
            CHECK(r->prompt_len > 0);
            for (size_t k = 0; k < r->prompt_len; k++)
                sum += (unsigned char)r->prompt[k];
        } else {
            CHECK(r->num_prompt_ids >= 1 &&
                  r->num_prompt_ids <= l->max_prompt_ids);
            for (uint32_t k = 0; k < r->num_prompt_ids; k++)
                CHECK(r->prompt_ids[k] >= 0 &&
                      (uint32_t)r->prompt_ids[k] < l->vocab_size);
        }
    } else {
        CHECK(r->prompt == NULL && r->prompt_ids == NULL);
        CHECK(r->num_messages >= 1 && r->num_messages <= l->max_messages);
        for (uint32_t i = 0; i < r->num_messages; i++) {
            const gg_chat_message *m = &r->messages[i];
            CHECK(m->role >= GG_ROLE_SYSTEM && m->role <= GG_ROLE_ASSISTANT);
            CHECK(m->text != NULL || m->len == 0);
            for (size_t k = 0; k < m->len; k++)
                sum += (unsigned char)m->text[k];
        }
    }
    /* Every byte above was read: ASan sees a text that is not whole. */
    CHECK(sum != (size_t)-1);
}

static void check_refused(const srv_error *e)
{
    CHECK((e->status >= 400 && e->status < 500) || e->status == 500);
    CHECK(e->type != NULL && e->type[0] != '\0');
    CHECK(e->message[0] != '\0');
    char *body = srv_error_body(e);
    CHECK(body != NULL);
    json_t *v = json_loads(body, 0, NULL);
    free(body);
    CHECK(v != NULL && json_object_size(v) == 1);
    json_t *err = json_object_get(v, "error");
    CHECK(json_is_object(err) && json_object_size(err) == 4);
    CHECK(json_is_string(json_object_get(err, "message")));
    CHECK(json_is_string(json_object_get(err, "type")));
    json_t *param = json_object_get(err, "param");
    json_t *code = json_object_get(err, "code");
    CHECK(json_is_string(param) || json_is_null(param));
    CHECK(json_is_string(code) || json_is_null(code));
    json_decref(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    pkv_fuzz_ops++;
    int kind = data[0] & 1 ? SRV_CHAT : SRV_COMPLETION;
    int tight = (data[0] >> 2) & 1, loose = (data[0] >> 3) & 1;
    srv_limits limits = {tight ? 16u : 4096u, tight ? 2u : 256u,
                         tight ? 1u : 256u, tight ? 1u : 256u,
                         loose ? 1u << 20 : 256u, "m"};
    char *body;
    size_t len = 0;
    if (data[0] & 2) {
        body = malloc(64 * size + 1);
        CHECK(body != NULL);
        for (size_t i = 1; i < size; i++) {
            const char *f = fragments[data[i] % NUM_FRAGMENTS];
            memcpy(body + len, f, strlen(f));
            len += strlen(f);
        }
    } else {
        /* An exact copy: ASan sees a read past the body's end. */
        len = size - 1;
        body = malloc(len ? len : 1);
        CHECK(body != NULL);
        memcpy(body, data + 1, len);
    }
    srv_request r;
    srv_error e;
    memset(&e, 0, sizeof e);
    if (srv_request_parse(kind, body, len, &limits, &r, &e) == 0) {
        check_accepted(&r, &limits);
        srv_request_free(&r);
    } else {
        CHECK(r.root == NULL && r.messages == NULL && r.prompt_ids == NULL);
        check_refused(&e);
    }
    free(body);
    return 0;
}
