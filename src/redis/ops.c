/* SPDX-License-Identifier: MIT */
/*
 * The engine-facing side of the connector: load, save, poll and cancel
 * build or find operations and move them between the queues under the
 * lock, and never wait for the network (internal.h says who owns what).
 */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include "internal.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static size_t align_up(size_t n, size_t align)
{
    return (n + align - 1) / align * align;
}

/* One allocation (free(op) frees it) holds the op, its argv and argvlen
 * arrays and chars bytes of keys (returned in *chars_out). */
static pkv__redis_op *op_new(int argc, size_t chars, char **chars_out)
{
    size_t n = (size_t)argc;
    size_t per_arg = sizeof(size_t) + sizeof(const char *);
    /* Half the room: the op and the padding fit in the other half. */
    if (n > (SIZE_MAX - chars) / per_arg / 2)
        return NULL;
    size_t lens_at = align_up(sizeof(pkv__redis_op), _Alignof(size_t));
    size_t argv_at = align_up(lens_at + n * sizeof(size_t),
                              _Alignof(const char *));
    size_t chars_at = argv_at + n * sizeof(const char *);
    unsigned char *block = calloc(1, chars_at + chars);
    if (block == NULL)
        return NULL;
    pkv__redis_op *op = (pkv__redis_op *)(void *)block;
    op->argc = argc;
    op->argvlen = (size_t *)(void *)(block + lens_at);
    op->argv = (const char **)(void *)(block + argv_at);
    *chars_out = (char *)(block + chars_at);
    return op;
}

/* The length of key, or PKV_STORE_KEY_MAX when it is NULL or too long. */
static size_t key_length(const char *key)
{
    if (key == NULL)
        return PKV_STORE_KEY_MAX;
    return strnlen(key, PKV_STORE_KEY_MAX);
}

/* Write key_prefix and key at chars; set argv[i] to them; return the byte
 * after their NUL. */
static char *put_key(const pkv_redis *redis, pkv__redis_op *op, int i,
                     char *chars, const char *key, size_t len)
{
    memcpy(chars, redis->prefix, redis->prefix_len);
    memcpy(chars + redis->prefix_len, key, len);
    chars[redis->prefix_len + len] = '\0';
    op->argv[i] = chars;
    op->argvlen[i] = redis->prefix_len + len;
    return chars + redis->prefix_len + len + 1;
}

/* Queue op for its lane; PKV_ERR_BAD_STATE (op freed) when its ticket
 * is already in the connector. One engine never reuses a ticket in
 * flight, so a duplicate means two engines share this connector (pkv.h
 * forbids it): cancel and poll match by ticket alone, and one engine's
 * cancel would take the other's op while its buffers are still written.
 * Refusing it keeps every ticket naming one op: a misuse costs misses,
 * never memory. */
static pkv_status enqueue(pkv_redis *redis, pkv__redis_op *op)
{
    pthread_mutex_lock(&redis->lock);
    if (redis->stop) {
        /* Destroyed while an engine still holds it: no lane runs. */
        redis->stats.errors++;
        pthread_mutex_unlock(&redis->lock);
        free(op);
        return PKV_ERR_STORE;
    }
    uint64_t t = op->ticket;
    const pkv__redis_op *load = redis->lanes[PKV__REDIS_LOAD].running;
    const pkv__redis_op *save = redis->lanes[PKV__REDIS_SAVE].running;
    if (pkv__redis_list_has(&redis->loads, t) ||
        pkv__redis_list_has(&redis->saves, t) ||
        pkv__redis_list_has(&redis->done, t) ||
        (load != NULL && load->ticket == t) ||
        (save != NULL && save->ticket == t)) {
        redis->stats.errors++;
        pthread_mutex_unlock(&redis->lock);
        free(op);
        return PKV_ERR_BAD_STATE;
    }
    pkv__redis_list_push(op->kind == PKV__REDIS_LOAD ? &redis->loads
                                                     : &redis->saves,
                         op);
    pthread_cond_signal(&redis->lanes[op->kind].wake);
    pthread_mutex_unlock(&redis->lock);
    return PKV_OK;
}

pkv_status pkv__redis_load(void *user, uint64_t ticket,
                           const char *const *keys, uint32_t num_keys,
                           void *values, size_t value_size, uint64_t *sizes)
{
    pkv_redis *redis = user;
    /* hiredis takes argc as an int. */
    if (redis == NULL || keys == NULL || num_keys == 0 || sizes == NULL ||
        (values == NULL && value_size > 0) || num_keys >= INT_MAX)
        return PKV_ERR_INVALID_ARGUMENT;
    size_t chars = 0;
    for (uint32_t i = 0; i < num_keys; i++) {
        size_t len = key_length(keys[i]);
        if (len >= PKV_STORE_KEY_MAX)
            return PKV_ERR_INVALID_ARGUMENT;
        if (chars > SIZE_MAX / 2)
            return PKV_ERR_OUT_OF_MEMORY;
        chars += redis->prefix_len + len + 1;
    }
    char *at;
    pkv__redis_op *op = op_new((int)num_keys + 1, chars, &at);
    if (op == NULL)
        return PKV_ERR_OUT_OF_MEMORY;
    op->ticket = ticket;
    op->kind = PKV__REDIS_LOAD;
    op->num_keys = num_keys;
    op->values = values;
    op->value_size = value_size;
    op->sizes = sizes;
    op->argv[0] = "MGET";
    op->argvlen[0] = 4;
    for (uint32_t i = 0; i < num_keys; i++)
        at = put_key(redis, op, (int)i + 1, at, keys[i],
                     strlen(keys[i]));
    return enqueue(redis, op);
}

pkv_status pkv__redis_save(void *user, uint64_t ticket, const char *key,
                           const void *value, size_t value_size)
{
    pkv_redis *redis = user;
    size_t len = key_length(key);
    /* hiredis formats a command's length as an int. */
    if (redis == NULL || len >= PKV_STORE_KEY_MAX ||
        (value == NULL && value_size > 0) || value_size > INT_MAX / 2)
        return PKV_ERR_INVALID_ARGUMENT;
    int ttl = redis->ttl[0] != '\0';
    char *at;
    pkv__redis_op *op = op_new(ttl ? 5 : 3, redis->prefix_len + len + 1, &at);
    if (op == NULL)
        return PKV_ERR_OUT_OF_MEMORY;
    op->ticket = ticket;
    op->kind = PKV__REDIS_SAVE;
    op->num_keys = 1;
    op->value = value;
    op->value_size = value_size;
    op->argv[0] = "SET";
    op->argvlen[0] = 3;
    put_key(redis, op, 1, at, key, len);
    /* An empty value needs a non-NULL pointer for hiredis. */
    op->argv[2] = value != NULL ? value : "";
    op->argvlen[2] = value_size;
    if (ttl) {
        op->argv[3] = "EX";
        op->argvlen[3] = 2;
        op->argv[4] = redis->ttl;
        op->argvlen[4] = strlen(redis->ttl);
    }
    return enqueue(redis, op);
}

uint32_t pkv__redis_poll(void *user, pkv_store_done *done, uint32_t capacity)
{
    pkv_redis *redis = user;
    if (redis == NULL || done == NULL || capacity == 0)
        return 0;
    pkv__redis_list taken = {NULL, NULL};
    uint32_t n = 0;
    pthread_mutex_lock(&redis->lock);
    for (; n < capacity && redis->done.head != NULL; n++) {
        pkv__redis_op *op = pkv__redis_list_pop(&redis->done);
        done[n].ticket = op->ticket;
        done[n].status = op->status;
        done[n].reserved0 = 0;
        pkv__redis_list_push(&taken, op);
    }
    pthread_mutex_unlock(&redis->lock);
    pkv__redis_list_free(&taken);
    return n;
}

void pkv__redis_cancel(void *user, uint64_t ticket)
{
    pkv_redis *redis = user;
    if (redis == NULL)
        return;
    pkv__redis_list gone = {NULL, NULL};
    pthread_mutex_lock(&redis->lock);
    pkv__redis_list_take(&redis->loads, ticket, &gone);
    pkv__redis_list_take(&redis->saves, ticket, &gone);
    pkv__redis_list_take(&redis->done, ticket, &gone);
    /* Its lane frees it when it is done with the connection; until then
     * the flag keeps it off the engine's buffers and the done queue. */
    for (int k = 0; k < 2; k++) {
        pkv__redis_op *running = redis->lanes[k].running;
        if (running != NULL && running->ticket == ticket)
            running->cancelled = 1;
    }
    pthread_mutex_unlock(&redis->lock);
    pkv__redis_list_free(&gone);
}

void pkv__redis_attach(void *user)
{
    pkv_redis *redis = user;
    if (redis == NULL)
        return;
    pthread_mutex_lock(&redis->lock);
    redis->engines++;
    pthread_mutex_unlock(&redis->lock);
}

void pkv__redis_detach(void *user)
{
    pkv_redis *redis = user;
    if (redis == NULL)
        return;
    pthread_mutex_lock(&redis->lock);
    if (redis->engines > 0)
        redis->engines--;
    int last = redis->engines == 0 && redis->closed;
    pthread_mutex_unlock(&redis->lock);
    /* pkv_redis_destroy came first and left the freeing to this call. */
    if (last)
        pkv__redis_connector_free(redis);
}
