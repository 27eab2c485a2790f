/* SPDX-License-Identifier: MIT */
/*
 * The mutex and once-flag pkv's thread-safe parts use (the inbox, the
 * process-wide program table): pthreads on POSIX systems, C11 threads
 * elsewhere.
 * Pthreads because ThreadSanitizer (GCC 12, clang 14) intercepts
 * pthread_mutex_* but not C11 mtx_*, which glibc implements on its
 * internal pthread functions: with mtx_* a host's TSan run would report
 * every access under the lock as a race.
 */
#ifndef PKV_LOCK_H
#define PKV_LOCK_H

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
typedef pthread_mutex_t pkv__lock;
typedef pthread_once_t pkv__once;
#define PKV__ONCE_INIT PTHREAD_ONCE_INIT
static inline void pkv__call_once(pkv__once *once, void (*fn)(void))
{
    pthread_once(once, fn);
}
static inline int pkv__lock_init(pkv__lock *l)
{
    return pthread_mutex_init(l, NULL) == 0 ? 0 : -1;
}
static inline void pkv__lock_destroy(pkv__lock *l)
{
    pthread_mutex_destroy(l);
}
static inline void pkv__lock_take(pkv__lock *l)
{
    pthread_mutex_lock(l);
}
static inline void pkv__lock_give(pkv__lock *l)
{
    pthread_mutex_unlock(l);
}
#else
#include <threads.h>
typedef mtx_t pkv__lock;
typedef once_flag pkv__once;
#define PKV__ONCE_INIT ONCE_FLAG_INIT
static inline void pkv__call_once(pkv__once *once, void (*fn)(void))
{
    call_once(once, fn);
}
static inline int pkv__lock_init(pkv__lock *l)
{
    return mtx_init(l, mtx_plain) == thrd_success ? 0 : -1;
}
static inline void pkv__lock_destroy(pkv__lock *l)
{
    mtx_destroy(l);
}
static inline void pkv__lock_take(pkv__lock *l)
{
    mtx_lock(l);
}
static inline void pkv__lock_give(pkv__lock *l)
{
    mtx_unlock(l);
}
#endif

#endif
