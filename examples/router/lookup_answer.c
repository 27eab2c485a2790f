/* SPDX-License-Identifier: MIT */
/* Reading a backend's prefix-lookup answer (lookup.h): jansson only, no
 * transfer, so that the fuzz target (tests/fuzz/fuzz_lookup.c) links
 * this file alone. */
#include "lookup.h"

#include <jansson.h>

/* A token count of the answer: a whole number from 0 up (*v), absent or
 * null (0), else -1 (not a lookup's answer). */
static int count_field(const json_t *o, const char *name, int required,
                       uint64_t *v)
{
    const json_t *f = json_object_get(o, name);
    *v = 0;
    if (f == NULL || json_is_null(f))
        return f == NULL && required ? -1 : 0;
    if (!json_is_integer(f) || json_integer_value(f) < 0)
        return -1;
    *v = (uint64_t)json_integer_value(f);
    return 0;
}

int64_t rt_lookup_answer(const char *data, size_t len, uint32_t limit)
{
    json_t *o = json_loadb(data, len, 0, NULL);
    uint64_t cached, stored;
    int ok = json_is_object(o) &&
             count_field(o, "cached_tokens", 1, &cached) == 0 &&
             count_field(o, "store_tokens", 0, &stored) == 0;
    json_decref(o);
    if (!ok)
        return -1;
    uint64_t most = cached > stored ? cached : stored;
    return most < limit ? (int64_t)most : (int64_t)limit;
}
