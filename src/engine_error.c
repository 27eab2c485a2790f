/* SPDX-License-Identifier: MIT */
/* An engine's messages (engine_error.h): its last error, set on any thread
 * under its lock, and its log lines. */
#include "engine_error.h"

#include "engine.h"
#include "lock.h"

#include <stdio.h>
#include <string.h>

/* Behind a pointer, so that a function taking a const engine (a getter)
 * can still report its failure here; written and read under the lock,
 * since pkv_seq_add and pkv_seq_abort fail on any thread. */
struct pkv__engine_message {
    pkv__lock lock;
    char text[PKV__ERROR_MAX];
    pkv_log_fn log; /* pkv_engine_params' */
    void *log_user;
    int32_t log_level;
};

pkv_status pkv__engine_message_create(const pkv__allocator *a,
                                      const pkv_engine_params *p,
                                      pkv__engine_message **out)
{
    pkv__engine_message *m = pkv__calloc(a, 1, sizeof *m);
    if (m == NULL || pkv__lock_init(&m->lock) != 0) {
        pkv__free(a, m, 1, sizeof *m);
        return PKV_ERR_OUT_OF_MEMORY;
    }
    m->log = p->log;
    m->log_user = p->log_user;
    m->log_level = p->log_level;
    *out = m;
    return PKV_OK;
}

void pkv__engine_message_destroy(pkv__engine_message *m,
                                 const pkv__allocator *a)
{
    if (m == NULL)
        return;
    pkv__lock_destroy(&m->lock);
    pkv__free(a, m, 1, sizeof *m);
}

/* pkv_engine_last_error's copy: the engine's message may change on
 * another thread while the caller reads it. */
static _Thread_local char engine_error_copy[PKV__ERROR_MAX];

const char *pkv_engine_last_error(const pkv_engine *engine)
{
    if (engine == NULL)
        return pkv_last_error();
    pkv__engine_message *m = engine->message;
    pkv__lock_take(&m->lock);
    memcpy(engine_error_copy, m->text, PKV__ERROR_MAX);
    pkv__lock_give(&m->lock);
    return engine_error_copy;
}

/* Format the message into message[PKV__ERROR_MAX], then copy it to this
 * thread's and, under the lock, the engine's. */
static void record(pkv__engine_message *m, char *message, pkv_status status,
                   const char *fmt, va_list args)
{
    pkv__format_error(message, status, fmt, args);
    pkv__set_error(message);
    pkv__lock_take(&m->lock);
    snprintf(m->text, PKV__ERROR_MAX, "%s", message);
    pkv__lock_give(&m->lock);
}

pkv_status pkv__engine_fail(pkv__engine_message *m, pkv_status status,
                            const char *fmt, ...)
{
    char message[PKV__ERROR_MAX];
    va_list args;
    va_start(args, fmt);
    record(m, message, status, fmt, args);
    va_end(args);
    pkv__engine_log(m, PKV_LOG_LEVEL_ERROR, "%s", message);
    return status;
}

pkv_status pkv__engine_fail_any_thread(pkv__engine_message *m,
                                       pkv_status status, const char *fmt,
                                       ...)
{
    char message[PKV__ERROR_MAX];
    va_list args;
    va_start(args, fmt);
    record(m, message, status, fmt, args);
    va_end(args);
    return status;
}

void pkv__engine_log(const pkv__engine_message *m, int32_t level,
                     const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    pkv__vlog(m->log, m->log_user, m->log_level, level, fmt, args);
    va_end(args);
}

pkv_status pkv__engine_check_size_out(pkv__engine_message *m, size_t *size)
{
    if (size != NULL)
        *size = 0;
    if (m == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (size == NULL)
        return pkv__engine_fail(m, PKV_ERR_INVALID_ARGUMENT, "size is NULL");
    return PKV_OK;
}
