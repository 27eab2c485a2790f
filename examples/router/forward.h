/* SPDX-License-Identifier: MIT */
/*
 * One request forwarded to a backend with libcurl, driven by the thread
 * that calls these functions (a connection's thread: libmicrohttpd runs
 * one per connection), through its own curl multi handle, so that the
 * answer is read as the client takes it and a client that leaves ends
 * the transfer (rt_forward_free closes the backend's connection, which
 * cancels the request there).
 */
#ifndef PKV_ROUTER_FORWARD_H
#define PKV_ROUTER_FORWARD_H

#include <curl/curl.h>

#include <stddef.h>

typedef struct rt_forward {
    CURLM *multi;
    CURL *easy;
    struct curl_slist *headers;
    char url[512];
    size_t max_bytes; /* of the answer held at once */
    /* The answer so far: status and type once its headers are in, bytes
     * data[sent, len) not yet read. */
    long status;
    char content_type[128];
    int headers_done;
    char *data;
    size_t len, cap, sent;
    size_t received; /* body bytes over the whole answer */
    int done;        /* the transfer ended, result says how */
    CURLcode result;
} rt_forward;

/* The headers of a JSON POST, for rt_post_new (free them with
 * curl_slist_free_all after the transfers); NULL out of memory. */
struct curl_slist *rt_post_headers(void);

/* A POST to url with headers (rt_post_headers'), the answer's body bytes
 * to on_bytes(..., arg), within timeout_ms (connecting within 5 s at
 * most): what the forward and the prefix lookups (lookup.h) share. The
 * caller sets the body. NULL out of memory. */
CURL *rt_post_new(const char *url, struct curl_slist *headers,
                  curl_write_callback on_bytes, void *arg, long timeout_ms);

/* POST a copy of body[0, len) to base_url + path
 * within timeout_s. 0, or -1 (out of memory, a URL too long). */
int rt_forward_start(rt_forward *f, const char *base_url, const char *path,
                     const char *body, size_t len, double timeout_s,
                     size_t max_bytes);

/* Drive the transfer until its end (whole), or until the answer's first
 * body bytes are in or its end (not whole). */
void rt_forward_wait(rt_forward *f, int whole);

/* Up to max bytes of the answer into buf, waiting for them: how many; 0
 * at its end (f->result says whether it ended well). */
size_t rt_forward_read(rt_forward *f, char *buf, size_t max);

/* End the transfer (closing the backend's connection if it is not done)
 * and free what f holds. */
void rt_forward_free(rt_forward *f);

#endif
