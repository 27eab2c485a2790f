/* SPDX-License-Identifier: MIT */
/* The merge queue both tokenizers keep (spm.c, bpe.c): a binary heap of
 * fixed-size elements in caller memory, the one `before` puts first on
 * top. */
#ifndef PKV_EXAMPLE_GGUF_HEAP_H
#define PKV_EXAMPLE_GGUF_HEAP_H

#include <stddef.h>

/* The largest element, in bytes. */
#define GG_HEAP_MAX_ELEM 64

typedef struct gg_heap {
    char *data;  /* room for every element pushed */
    size_t size; /* of one element, at most GG_HEAP_MAX_ELEM */
    size_t len;
    int (*before)(const void *a, const void *b);
} gg_heap;

void gg_heap_push(gg_heap *h, const void *e);

/* The first element into *out; the heap must not be empty. */
void gg_heap_pop(gg_heap *h, void *out);

#endif
