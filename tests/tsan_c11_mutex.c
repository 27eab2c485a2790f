/* SPDX-License-Identifier: MIT */
/*
 * For ThreadSanitizer builds only: C11 mtx_* routed to pthread_mutex_*.
 *
 * glibc implements mtx_lock and friends by calling its internal pthread
 * mutex functions directly, and the TSan runtimes of GCC 12 and clang 14
 * intercept pthread_mutex_* but no C11 mtx_*; so TSan never sees the inbox
 * lock taken and reports every access under it as a race. On glibc a mtx_t
 * is a pthread_mutex_t (same size and layout, mtx_plain is the default
 * mutex type), so calling the pthread functions on it is what glibc does
 * itself, through the entry points TSan watches. The library is linked
 * statically into the test, so these definitions take the place of libc's.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <pthread.h>
#include <threads.h>

#if defined(__GLIBC__)

_Static_assert(sizeof(mtx_t) == sizeof(pthread_mutex_t),
               "mtx_t wraps pthread_mutex_t on glibc");

static pthread_mutex_t *as_pthread(mtx_t *m)
{
    return (pthread_mutex_t *)(void *)m;
}

int mtx_init(mtx_t *m, int type)
{
    pthread_mutexattr_t attr;
    if (pthread_mutexattr_init(&attr) != 0)
        return thrd_error;
    int st = 0;
    if (type & mtx_recursive)
        st = pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    if (st == 0)
        st = pthread_mutex_init(as_pthread(m), &attr);
    pthread_mutexattr_destroy(&attr);
    return st == 0 ? thrd_success : thrd_error;
}

int mtx_lock(mtx_t *m)
{
    return pthread_mutex_lock(as_pthread(m)) == 0 ? thrd_success : thrd_error;
}

int mtx_trylock(mtx_t *m)
{
    int st = pthread_mutex_trylock(as_pthread(m));
    return st == 0 ? thrd_success : st == EBUSY ? thrd_busy : thrd_error;
}

int mtx_unlock(mtx_t *m)
{
    return pthread_mutex_unlock(as_pthread(m)) == 0 ? thrd_success
                                                    : thrd_error;
}

void mtx_destroy(mtx_t *m)
{
    pthread_mutex_destroy(as_pthread(m));
}

#endif
