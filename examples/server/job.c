/* SPDX-License-Identifier: MIT */
/* A request in flight (job.h). */
#include "job.h"

#include <microhttpd.h>

#include <stdlib.h>
#include <string.h>

srv_job *srv_job_new(void)
{
    srv_job *j = calloc(1, sizeof *j);
    if (j == NULL)
        return NULL;
    if (pthread_mutex_init(&j->lock, NULL) != 0) {
        free(j);
        return NULL;
    }
    j->refs = 1;
    return j;
}

void srv_job_ref(srv_job *j)
{
    pthread_mutex_lock(&j->lock);
    j->refs++;
    pthread_mutex_unlock(&j->lock);
}

void srv_job_unref(srv_job *j)
{
    if (j == NULL)
        return;
    pthread_mutex_lock(&j->lock);
    int last = --j->refs == 0;
    pthread_mutex_unlock(&j->lock);
    if (!last)
        return;
    pthread_mutex_destroy(&j->lock);
    free(j->prompt);
    for (uint32_t i = 0; i < j->num_stops; i++)
        free(j->stops[i]);
    free(j->text);
    free(j->body);
    free(j->out);
    free(j);
}

/* Under the lock: resume a suspended connection. */
static void wake(srv_job *j)
{
    if (j->suspended) {
        j->suspended = 0;
        MHD_resume_connection(j->conn);
    }
}

void srv_job_suspend(srv_job *j)
{
    j->suspended = 1;
    MHD_suspend_connection(j->conn);
}

/* Bytes at the end of text[0, len) that begin a UTF-8 character not yet
 * whole (a lead byte wanting more continuation bytes than follow it). */
static size_t partial_char(const char *text, size_t len)
{
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        unsigned char c = (unsigned char)text[len - back];
        if ((c & 0xc0) == 0x80)
            continue; /* a continuation byte: look further back */
        size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

/* The longest end of text[0, len) that begins a stop string. */
static size_t partial_stop(const srv_job *j)
{
    size_t hold = 0;
    for (uint32_t s = 0; s < j->num_stops; s++)
        for (size_t k = j->stop_lens[s] - 1; k > hold; k--)
            if (k <= j->len &&
                memcmp(j->text + j->len - k, j->stops[s], k) == 0) {
                hold = k;
                break;
            }
    return hold;
}

/* Under the lock: the first stop string whose end is in the bytes from
 * `from` on; the text is cut where it begins. 1 when found. */
static int cut_at_stop(srv_job *j, size_t from)
{
    size_t best = j->len + 1;
    for (uint32_t s = 0; s < j->num_stops; s++) {
        size_t n = j->stop_lens[s];
        size_t start = from >= n - 1 ? from - (n - 1) : 0;
        for (size_t at = start; at + n <= j->len && at < best; at++)
            if (memcmp(j->text + at, j->stops[s], n) == 0) {
                best = at;
                break;
            }
    }
    if (best > j->len)
        return 0;
    j->len = best;
    return 1;
}

int srv_job_append(srv_job *j, const char *bytes, size_t n)
{
    pthread_mutex_lock(&j->lock);
    int rc = 0;
    if (j->len + n + 1 > j->cap) {
        size_t cap = 2 * j->cap + n + 256;
        char *grown = realloc(j->text, cap);
        if (grown == NULL) {
            pthread_mutex_unlock(&j->lock);
            return -1;
        }
        j->text = grown;
        j->cap = cap;
    }
    size_t from = j->len;
    memcpy(j->text + j->len, bytes, n);
    j->len += n;
    if (cut_at_stop(j, from)) {
        j->ready = j->len;
        rc = 1;
    } else {
        size_t hold = partial_stop(j), part = partial_char(j->text, j->len);
        hold = hold > part ? hold : part;
        /* Never back: bytes already sent stay sent (a stop string that
         * began before them could not be held by its own prefix). */
        size_t ready = j->len - hold;
        j->ready = ready > j->ready ? ready : j->ready;
    }
    if (j->stream && j->ready > j->text_sent)
        wake(j);
    pthread_mutex_unlock(&j->lock);
    return rc;
}

void srv_job_end(srv_job *j, int end, const srv_error *error)
{
    pthread_mutex_lock(&j->lock);
    if (j->end == SRV_END_NONE) {
        j->end = end;
        j->ready = j->len;
        if (error != NULL)
            j->error = *error;
        wake(j);
    }
    pthread_mutex_unlock(&j->lock);
}
