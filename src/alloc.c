/* SPDX-License-Identifier: MIT */
/* Host memory through the engine's allocator, overflow-checked (alloc.h). */
#include "alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void *default_alloc(void *user, size_t size)
{
    (void)user;
    return malloc(size);
}

static void default_free(void *user, void *ptr, size_t size)
{
    (void)user;
    (void)size;
    free(ptr);
}

pkv_status pkv__allocator_resolve(const pkv_allocator *in, pkv__allocator *out)
{
    if (in->alloc == NULL && in->free == NULL) {
        out->alloc = default_alloc;
        out->free = default_free;
        out->user = NULL;
        return PKV_OK;
    }
    if (in->alloc == NULL || in->free == NULL)
        return PKV_ERR_INVALID_ARGUMENT;
    out->alloc = in->alloc;
    out->free = in->free;
    out->user = in->user;
    return PKV_OK;
}

void *pkv__calloc(const pkv__allocator *a, size_t count, size_t size)
{
    if (size != 0 && count > SIZE_MAX / size)
        return NULL;
    size_t bytes = count * size;
    /* Never ask for 0 bytes: malloc(0) may return NULL, which would read as
     * a failure. */
    void *p = a->alloc(a->user, bytes ? bytes : 1);
    if (p != NULL)
        memset(p, 0, bytes);
    return p;
}

pkv_status pkv__grow(const pkv__allocator *a, void *array, size_t *capacity,
                     size_t count, size_t needed, size_t size, void **out)
{
    *out = array;
    if (needed <= *capacity)
        return PKV_OK;
    size_t cap = *capacity ? *capacity : 4;
    while (cap < needed)
        cap = cap > SIZE_MAX / 2 ? needed : cap * 2;
    void *grown = pkv__calloc(a, cap, size);
    if (grown == NULL)
        return PKV_ERR_OUT_OF_MEMORY;
    if (count)
        memcpy(grown, array, count * size);
    pkv__free(a, array, *capacity, size);
    *capacity = cap;
    *out = grown;
    return PKV_OK;
}

void pkv__free(const pkv__allocator *a, void *ptr, size_t count, size_t size)
{
    if (ptr == NULL)
        return;
    size_t bytes = count * size;
    a->free(a->user, ptr, bytes ? bytes : 1);
}
