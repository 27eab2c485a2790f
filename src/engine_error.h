/* SPDX-License-Identifier: MIT */
/* The engine's messages (engine_error.c): its last error, which any thread
 * may set, and its log lines. */
#ifndef PKV_ENGINE_ERROR_H
#define PKV_ENGINE_ERROR_H

#include "alloc.h"
#include "error.h"

/* The engine's last message, its lock and the host's log callback
 * (opaque). */
typedef struct pkv__engine_message pkv__engine_message;

/* The messages of an engine made with params (its log callback, user and
 * level). */
pkv_status pkv__engine_message_create(const pkv__allocator *alloc,
                                      const pkv_engine_params *params,
                                      pkv__engine_message **out);
void pkv__engine_message_destroy(pkv__engine_message *message,
                                 const pkv__allocator *alloc);

/* Set the engine's message (and this thread's), log it, return status. */
pkv_status pkv__engine_fail(pkv__engine_message *message, pkv_status status,
                            const char *fmt, ...) PKV__PRINTF(3, 4);

/* The same for a call that may run on any thread (pkv_seq_add,
 * pkv_seq_abort): no log line, since the log callback is called on the
 * stepping thread only. */
pkv_status pkv__engine_fail_any_thread(pkv__engine_message *message,
                                       pkv_status status, const char *fmt,
                                       ...) PKV__PRINTF(3, 4);

/* The first check of a call that writes a size (export, save): *size
 * zeroed when size is not NULL; PKV_ERR_INVALID_ARGUMENT for a NULL
 * engine (message NULL) or size. */
pkv_status pkv__engine_check_size_out(pkv__engine_message *message,
                                      size_t *size);

/* Send one line to the engine's log callback if level is enabled. */
void pkv__engine_log(const pkv__engine_message *message, int32_t level,
                     const char *fmt, ...) PKV__PRINTF(3, 4);

#endif
