/* SPDX-License-Identifier: MIT */
/* An engine's messages (engine.h): its last error, set on any thread under
 * its lock, and its log lines. */
#include "engine.h"

#include <stdio.h>
#include <string.h>

/* pkv_engine_last_error's copy: the engine's message may change on
 * another thread while the caller reads it. */
static _Thread_local char engine_error_copy[PKV__ERROR_MAX];

const char *pkv_engine_last_error(const pkv_engine *engine)
{
    if (engine == NULL)
        return pkv_last_error();
    pkv__lock_take(engine->error_lock);
    memcpy(engine_error_copy, engine->last_error, PKV__ERROR_MAX);
    pkv__lock_give(engine->error_lock);
    return engine_error_copy;
}

/* Format the message into message[PKV__ERROR_MAX], then copy it to this
 * thread's and, under the lock, the engine's. */
static void record(const pkv_engine *engine, char *message, pkv_status status,
                   const char *fmt, va_list args)
{
    pkv__format_error(message, status, fmt, args);
    pkv__set_error(message);
    pkv__lock_take(engine->error_lock);
    snprintf(engine->last_error, PKV__ERROR_MAX, "%s", message);
    pkv__lock_give(engine->error_lock);
}

pkv_status pkv__engine_fail(const pkv_engine *engine, pkv_status status,
                            const char *fmt, ...)
{
    char message[PKV__ERROR_MAX];
    va_list args;
    va_start(args, fmt);
    record(engine, message, status, fmt, args);
    va_end(args);
    pkv__engine_log(engine, PKV_LOG_ERROR, "%s", message);
    return status;
}

pkv_status pkv__engine_fail_any_thread(const pkv_engine *engine,
                                       pkv_status status, const char *fmt,
                                       ...)
{
    char message[PKV__ERROR_MAX];
    va_list args;
    va_start(args, fmt);
    record(engine, message, status, fmt, args);
    va_end(args);
    return status;
}

void pkv__engine_log(const pkv_engine *engine, int32_t level, const char *fmt,
                     ...)
{
    va_list args;
    va_start(args, fmt);
    pkv__vlog(engine->params.log, engine->params.log_user,
              engine->params.log_level, level, fmt, args);
    va_end(args);
}

pkv_status pkv__engine_check_size_out(const pkv_engine *e, size_t *size)
{
    if (size != NULL)
        *size = 0;
    if (e == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (size == NULL)
        return pkv__engine_fail(e, PKV_ERR_INVALID_ARGUMENT, "size is NULL");
    return PKV_OK;
}
