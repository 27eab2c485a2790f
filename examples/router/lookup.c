/* SPDX-License-Identifier: MIT */
/* Asking the backends how much of a prompt they hold (lookup.h). */
#include "lookup.h"

#include "forward.h"

#include <curl/curl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A lookup's answer is a small object: more is not one. */
#define ANSWER_MAX 1024

/* One backend asked. */
typedef struct asked {
    CURL *easy;
    char url[512];
    char data[ANSWER_MAX];
    size_t len;
    int done; /* the transfer ended well */
} asked;

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    asked *a = arg;
    size_t bytes = size * n;
    if (bytes > sizeof a->data - a->len)
        return 0; /* curl ends the transfer: not a lookup's answer */
    memcpy(a->data + a->len, p, bytes);
    a->len += bytes;
    return bytes;
}

/* The effective prefix a's answer gives, at most limit tokens; -1 when
 * the transfer failed, its status is not 200 or its body is not a
 * lookup's answer (rt_lookup_answer). */
static int64_t effective(asked *a, uint32_t limit)
{
    long status = 0;
    curl_easy_getinfo(a->easy, CURLINFO_RESPONSE_CODE, &status);
    if (!a->done || status != 200)
        return -1;
    return rt_lookup_answer(a->data, a->len, limit);
}

/* Start asking a backend at base; -1 when it could not be set up. */
static int start(CURLM *multi, asked *a, const char *base, const char *path,
                 const char *body, size_t len, struct curl_slist *headers,
                 long timeout_ms)
{
    int n = snprintf(a->url, sizeof a->url, "%s/pkv/lookup%s", base, path);
    if (n < 0 || (size_t)n >= sizeof a->url)
        return -1;
    a->easy = rt_post_new(a->url, headers, on_body, a, timeout_ms);
    if (a->easy == NULL)
        return -1;
    /* body outlives the transfers: no copy. */
    curl_easy_setopt(a->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(a->easy, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(a->easy, CURLOPT_PRIVATE, a);
    return curl_multi_add_handle(multi, a->easy) == CURLM_OK ? 0 : -1;
}

/* Drive every transfer until all ended or the lookup's time is up. */
static void drive(CURLM *multi, long timeout_ms)
{
    double end = rt_now_s() + (double)timeout_ms * 1e-3;
    int running = 1;
    while (running > 0) {
        curl_multi_perform(multi, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(multi, &left)) != NULL) {
            asked *a = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &a);
            if (msg->msg == CURLMSG_DONE && a != NULL)
                a->done = msg->data.result == CURLE_OK;
        }
        double wait = (end - rt_now_s()) * 1e3; /* ms */
        if (running == 0 || wait <= 0)
            break;
        curl_multi_poll(multi, NULL, 0, (int)wait + 1, NULL);
    }
}

void rt_lookup_ask(rt_router *r, const char *path, const char *body,
                   size_t len, const uint8_t *ask, rt_match *m)
{
    asked *all = calloc(r->num_backends, sizeof *all);
    CURLM *multi = curl_multi_init();
    struct curl_slist *headers = rt_post_headers();
    uint64_t asked_n = 0, answered = 0;
    for (uint32_t b = 0; b < r->num_backends; b++) {
        m->tokens[b] = 0;
        if (all == NULL || multi == NULL || headers == NULL ||
            !((ask[b / 8] >> (b % 8)) & 1))
            continue;
        asked_n++;
        start(multi, &all[b], r->backends[b].url, path, body, len, headers,
              (long)r->lookup_timeout_ms);
    }
    if (asked_n > 0)
        drive(multi, (long)r->lookup_timeout_ms);
    for (uint32_t b = 0; all != NULL && b < r->num_backends; b++) {
        if (all[b].easy == NULL)
            continue;
        int64_t got = effective(&all[b], m->prompt_tokens);
        answered += got >= 0;
        m->tokens[b] = got > 0 ? (uint32_t)got : 0;
        curl_multi_remove_handle(multi, all[b].easy);
        curl_easy_cleanup(all[b].easy);
    }
    m->looked_up = 1;
    if (multi != NULL)
        curl_multi_cleanup(multi);
    curl_slist_free_all(headers);
    free(all);
    pthread_mutex_lock(&r->lock);
    r->lookups++;
    r->lookup_unanswered += asked_n - answered;
    pthread_mutex_unlock(&r->lock);
}
