/* SPDX-License-Identifier: MIT */
/* One request forwarded to a backend (forward.h). */
#define _POSIX_C_SOURCE 200809L /* strncasecmp */
#include "forward.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CONNECT_TIMEOUT_MS 5000L
#define POLL_MS 100

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    rt_forward *f = arg;
    size_t bytes = size * n;
    if (f->len - f->sent + bytes > f->max_bytes)
        return 0; /* curl ends the transfer: CURLE_WRITE_ERROR */
    if (f->sent == f->len)
        f->sent = f->len = 0;
    if (f->len + bytes > f->cap) {
        size_t cap = f->cap ? f->cap : 4096;
        while (cap < f->len + bytes)
            cap *= 2;
        char *data = realloc(f->data, cap);
        if (data == NULL)
            return 0;
        f->data = data;
        f->cap = cap;
    }
    memcpy(f->data + f->len, p, bytes);
    f->len += bytes;
    f->received += bytes;
    return bytes;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    rt_forward *f = arg;
    size_t bytes = size * n;
    static const char type[] = "content-type:";
    if (bytes == 2 && p[0] == '\r') {
        curl_easy_getinfo(f->easy, CURLINFO_RESPONSE_CODE, &f->status);
        f->headers_done = f->status >= 200;
    } else if (bytes > sizeof type - 1 &&
               strncasecmp(p, type, sizeof type - 1) == 0) {
        size_t i = sizeof type - 1, end = bytes;
        while (i < end && p[i] == ' ')
            i++;
        while (end > i && (p[end - 1] == '\r' || p[end - 1] == '\n'))
            end--;
        if (end - i < sizeof f->content_type) {
            memcpy(f->content_type, p + i, end - i);
            f->content_type[end - i] = 0;
        }
    }
    return bytes;
}

struct curl_slist *rt_post_headers(void)
{
    struct curl_slist *h =
        curl_slist_append(NULL, "Content-Type: application/json");
    /* No "Expect: 100-continue": the body goes at once. */
    struct curl_slist *both = h ? curl_slist_append(h, "Expect:") : NULL;
    if (both == NULL)
        curl_slist_free_all(h);
    return both;
}

CURL *rt_post_new(const char *url, struct curl_slist *headers,
                  curl_write_callback on_bytes, void *arg, long timeout_ms)
{
    CURL *e = curl_easy_init();
    if (e == NULL)
        return NULL;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_bytes);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, arg);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     timeout_ms < CONNECT_TIMEOUT_MS ? timeout_ms
                                                     : CONNECT_TIMEOUT_MS);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    return e;
}

int rt_forward_start(rt_forward *f, const char *base_url, const char *path,
                     const char *body, size_t len, double timeout_s,
                     size_t max_bytes)
{
    memset(f, 0, sizeof *f);
    f->max_bytes = max_bytes;
    int n = snprintf(f->url, sizeof f->url, "%s%s", base_url, path);
    if (n < 0 || (size_t)n >= sizeof f->url)
        return -1;
    f->multi = curl_multi_init();
    f->headers = rt_post_headers();
    f->easy = f->headers ? rt_post_new(f->url, f->headers, on_body, f,
                                       (long)(timeout_s * 1000))
                         : NULL;
    if (f->multi == NULL || f->easy == NULL) {
        rt_forward_free(f);
        return -1;
    }
    CURL *e = f->easy;
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    if (curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, body) != CURLE_OK) {
        rt_forward_free(f);
        return -1;
    }
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, f);
    if (curl_multi_add_handle(f->multi, e) != CURLM_OK) {
        rt_forward_free(f);
        return -1;
    }
    return 0;
}

/* One round: perform, note the end, wait up to POLL_MS for more. */
static void pump(rt_forward *f)
{
    int running = 0;
    size_t before = f->received;
    curl_multi_perform(f->multi, &running);
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(f->multi, &left)) != NULL)
        if (m->msg == CURLMSG_DONE) {
            f->done = 1;
            f->result = m->data.result;
        }
    if (!f->done && f->received == before)
        curl_multi_poll(f->multi, NULL, 0, POLL_MS, NULL);
}

void rt_forward_wait(rt_forward *f, int whole)
{
    while (!f->done && (whole || !f->headers_done || f->len == f->sent))
        pump(f);
}

size_t rt_forward_read(rt_forward *f, char *buf, size_t max)
{
    while (f->sent == f->len && !f->done)
        pump(f);
    size_t n = f->len - f->sent < max ? f->len - f->sent : max;
    memcpy(buf, f->data + f->sent, n);
    f->sent += n;
    return n;
}

void rt_forward_free(rt_forward *f)
{
    if (f->easy != NULL) {
        if (f->multi != NULL)
            curl_multi_remove_handle(f->multi, f->easy);
        curl_easy_cleanup(f->easy);
    }
    if (f->multi != NULL)
        curl_multi_cleanup(f->multi);
    curl_slist_free_all(f->headers);
    free(f->data);
    memset(f, 0, sizeof *f);
}
