/* SPDX-License-Identifier: MIT */
/* The tokenizers' merge queue (heap.h). */
#include "heap.h"

#include <string.h>

static char *at(const gg_heap *h, size_t i)
{
    return h->data + i * h->size;
}

void gg_heap_push(gg_heap *h, const void *e)
{
    size_t i = h->len++;
    while (i > 0 && h->before(e, at(h, (i - 1) / 2))) {
        memcpy(at(h, i), at(h, (i - 1) / 2), h->size);
        i = (i - 1) / 2;
    }
    memcpy(at(h, i), e, h->size);
}

void gg_heap_pop(gg_heap *h, void *out)
{
    char last[GG_HEAP_MAX_ELEM];
    memcpy(out, at(h, 0), h->size);
    memcpy(last, at(h, --h->len), h->size);
    size_t i = 0, n = h->len;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && h->before(at(h, c + 1), at(h, c)))
            c++;
        if (!h->before(at(h, c), last))
            break;
        memcpy(at(h, i), at(h, c), h->size);
        i = c;
    }
    if (n > 0)
        memcpy(at(h, i), last, h->size);
}
