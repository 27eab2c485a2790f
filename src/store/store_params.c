/* SPDX-License-Identifier: MIT */
/* A host's pkv_store (store_params.h): its defaults and its check. */
#include "store/store_params.h"

#include "error.h"
#include "struct_sizes.h"

#include <string.h>

#define DEFAULT_TIMEOUT_MS 1000u
#define DEFAULT_BUDGET (64ull << 20)

pkv_status pkv_store_init(pkv_store *store)
{
    if (store == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "store is NULL");
    memset(store, 0, sizeof *store);
    store->struct_size = sizeof *store;
    store->timeout_ms = DEFAULT_TIMEOUT_MS;
    store->max_load_bytes = DEFAULT_BUDGET;
    store->max_save_bytes = DEFAULT_BUDGET;
    return PKV_OK;
}

/* The host's connector over the defaults: 0, or 1 with why[] set. */
static int read_store(pkv_store *out, const pkv_store *in, char *why,
                      size_t why_size)
{
    pkv_store_init(out);
    return pkv__struct_read(out, in, in->struct_size, PKV__STORE_MIN_SIZE,
                            sizeof *out, "params->store", "pkv_store_init",
                            why, why_size);
}

void pkv__store_read(pkv_store *out, const pkv_store *store)
{
    char why[128];
    read_store(out, store, why, sizeof why);
}

pkv_status pkv__store_check(const pkv_store *store)
{
    char why[128];
    pkv_store copy;
    if (read_store(&copy, store, why, sizeof why))
        return pkv__fail(PKV_ERR_STRUCT_SIZE, "%s", why);
    const pkv_store *s = &copy;
    if (s->load == NULL || s->save == NULL || s->poll == NULL ||
        s->cancel == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->store: load, save, poll and cancel must "
                         "all be set");
    if ((s->flags & ~PKV_STORE_SAVE_GENERATED) != 0)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->store->flags is %#x; only "
                         "PKV_STORE_SAVE_GENERATED is defined",
                         (unsigned)s->flags);
    if (s->reserved0 != 0)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->store->reserved0 is %u; it must be 0",
                         (unsigned)s->reserved0);
    if (s->timeout_ms == 0)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->store->timeout_ms is 0");
    /* Buffers of a budget's size must be addressable (32-bit hosts). */
    if ((uint64_t)(size_t)s->max_load_bytes != s->max_load_bytes ||
        (uint64_t)(size_t)s->max_save_bytes != s->max_save_bytes)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->store: max_load_bytes and max_save_bytes "
                         "must fit in size_t");
    return PKV_OK;
}
