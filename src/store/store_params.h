/* SPDX-License-Identifier: MIT */
/*
 * A host's pkv_store, the parameters of a KV store (store_params.c):
 * pkv_store_init's defaults and the check engine creation makes. Below
 * the engine: the parameters' check (engine_params.c) calls it, and the
 * engine's side of the store (engine_store.c) fills its copy with it.
 */
#ifndef PKV_STORE_STORE_PARAMS_H
#define PKV_STORE_STORE_PARAMS_H

#include "pkv/pkv.h"

/* Check a host's pkv_store (create): PKV_OK, or the status with this
 * thread's message set. */
pkv_status pkv__store_check(const pkv_store *store);

/* A checked store (pkv__store_check passed) copied over the defaults into
 * *out: fields appended after the caller's header keep theirs. */
void pkv__store_read(pkv_store *out, const pkv_store *store);

#endif
