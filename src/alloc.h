/* SPDX-License-Identifier: MIT */
/* Host memory through the engine's allocator (pkv_allocator), with sizes
 * checked for overflow. Every module allocates through this so that the
 * out-of-memory sweep in the tests reaches every allocation. */
#ifndef PKV_ALLOC_H
#define PKV_ALLOC_H

#include "pkv/pkv.h"

/* An allocator with its defaults resolved: both functions always set. */
typedef struct pkv__allocator {
    void *(*alloc)(void *user, size_t size);
    void (*free)(void *user, void *ptr, size_t size);
    void *user;
} pkv__allocator;

/* Resolve a public allocator: both NULL gives malloc/free; exactly one NULL
 * is an error (PKV_ERR_INVALID_ARGUMENT). */
pkv_status pkv__allocator_resolve(const pkv_allocator *in, pkv__allocator *out);

/* count * size bytes, zeroed; NULL on overflow or failure. */
void *pkv__calloc(const pkv__allocator *a, size_t count, size_t size);

/* Room for at least `needed` elements of `size` bytes in `array` (count
 * live elements, *capacity allocated): when it is too small, a new array
 * (capacity doubling from 4) gets the live elements, the rest zeroed, the
 * old one is freed and *capacity updated. *out is the array to use from now
 * on (`array` itself when it was big enough). PKV_ERR_OUT_OF_MEMORY
 * changes nothing. */
pkv_status pkv__grow(const pkv__allocator *a, void *array, size_t *capacity,
                     size_t count, size_t needed, size_t size, void **out);

/* Release what pkv__calloc returned for the same count and size. NULL is a
 * no-op. */
void pkv__free(const pkv__allocator *a, void *ptr, size_t count, size_t size);

#endif
