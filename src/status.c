/* SPDX-License-Identifier: MIT */
/* Version, status names and messages, and the thread-local last error. */
#include "error.h"

#include <stdio.h>

uint32_t pkv_version_number(void)
{
    return PKV_VERSION_NUMBER;
}

const char *pkv_version_string(void)
{
    return PKV_VERSION_STRING;
}

const char *pkv_status_name(pkv_status status)
{
    switch (status) {
#define PKV__NAME_CASE(name, value, message) \
    case name:                               \
        return #name;
        PKV_STATUS_LIST(PKV__NAME_CASE)
#undef PKV__NAME_CASE
    }
    return "PKV_UNKNOWN_STATUS";
}

const char *pkv_status_string(pkv_status status)
{
    switch (status) {
#define PKV__MESSAGE_CASE(name, value, message) \
    case name:                                  \
        return message;
        PKV_STATUS_LIST(PKV__MESSAGE_CASE)
#undef PKV__MESSAGE_CASE
    }
    return "unknown status";
}

static _Thread_local char thread_error[PKV__ERROR_MAX];

const char *pkv_last_error(void)
{
    return thread_error;
}

void pkv__format_error(char *buf, pkv_status status, const char *fmt,
                       va_list args)
{
    int n = snprintf(buf, PKV__ERROR_MAX, "%s: ", pkv_status_name(status));
    if (n < 0 || n >= PKV__ERROR_MAX)
        return;
    vsnprintf(buf + n, (size_t)(PKV__ERROR_MAX - n), fmt, args);
}

const char *pkv__describe(char *buf, size_t size, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    vsnprintf(buf, size, fmt, args);
    va_end(args);
    return buf;
}

void pkv__set_error(const char *message)
{
    snprintf(thread_error, sizeof thread_error, "%s", message);
}

pkv_status pkv__fail(pkv_status status, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    pkv__format_error(thread_error, status, fmt, args);
    va_end(args);
    return status;
}

void pkv__vlog(pkv_log_fn log, void *user, int32_t max_level, int32_t level,
               const char *fmt, va_list args)
{
    if (log == NULL || level > max_level)
        return;
    char line[PKV__ERROR_MAX];
    vsnprintf(line, sizeof line, fmt, args);
    log(user, level, line);
}

void pkv__log(pkv_log_fn log, void *user, int32_t max_level, int32_t level,
              const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    pkv__vlog(log, user, max_level, level, fmt, args);
    va_end(args);
}
