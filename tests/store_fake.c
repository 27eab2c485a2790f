/* SPDX-License-Identifier: MIT */
/* The in-process KV store of the tests (store_fake.h). */
#include "store_fake.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *xalloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    if (p == NULL) {
        fprintf(stderr, "store_fake: out of memory\n");
        abort();
    }
    return p;
}

static void contract(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "store_fake: the engine broke the contract: %s\n",
                what);
        abort();
    }
}

void fs_data_free(fs_data *data)
{
    for (size_t i = 0; i < data->count; i++)
        free(data->entries[i].value);
    free(data->entries);
    memset(data, 0, sizeof *data);
}

fs_entry *fs_get(fs_data *data, const char *key)
{
    for (size_t i = 0; i < data->count; i++)
        if (strcmp(data->entries[i].key, key) == 0)
            return &data->entries[i];
    return NULL;
}

void fs_put(fs_data *data, const char *key, const void *value, size_t size)
{
    fs_entry *e = fs_get(data, key);
    if (e == NULL) {
        if (data->count == data->capacity) {
            data->capacity = data->capacity * 2 + 16;
            fs_entry *grown = xalloc(data->capacity * sizeof *grown);
            if (data->count)
                memcpy(grown, data->entries, data->count * sizeof *grown);
            free(data->entries);
            data->entries = grown;
        }
        e = &data->entries[data->count++];
        memset(e, 0, sizeof *e);
        contract(strlen(key) < PKV_STORE_KEY_MAX, "key too long");
        strcpy(e->key, key);
    }
    free(e->value);
    e->value = xalloc(size);
    memcpy(e->value, value, size);
    e->size = size;
    e->written = ++data->clock;
}

void fs_delete(fs_data *data, const char *key)
{
    fs_entry *e = fs_get(data, key);
    if (e == NULL)
        return;
    free(e->value);
    *e = data->entries[--data->count];
}

static fs_op *new_op(fs_store *fs, uint64_t ticket)
{
    contract(ticket > fs->last_ticket, "tickets must be new");
    fs->last_ticket = ticket;
    if (fs->num_ops == fs->capacity) {
        fs->capacity = fs->capacity * 2 + 8;
        fs_op *grown = xalloc(fs->capacity * sizeof *grown);
        if (fs->num_ops)
            memcpy(grown, fs->ops, fs->num_ops * sizeof *grown);
        free(fs->ops);
        fs->ops = grown;
    }
    fs_op *op = &fs->ops[fs->num_ops++];
    memset(op, 0, sizeof *op);
    op->ticket = ticket;
    op->polls_left = fs->delay_polls;
    return op;
}

static pkv_status fs_load(void *user, uint64_t ticket,
                          const char *const *keys, uint32_t num_keys,
                          void *values, size_t value_size, uint64_t *sizes)
{
    fs_store *fs = user;
    contract(num_keys > 0 && keys && values && sizes, "load arguments");
    if (fs->refuse_loads)
        return PKV_ERR_STORE;
    fs->loads++;
    fs_op *op = new_op(fs, ticket);
    op->num_keys = num_keys;
    op->keys = xalloc((size_t)num_keys * PKV_STORE_KEY_MAX);
    for (uint32_t i = 0; i < num_keys; i++) {
        contract(strlen(keys[i]) < PKV_STORE_KEY_MAX, "key too long");
        strcpy(op->keys + (size_t)i * PKV_STORE_KEY_MAX, keys[i]);
    }
    op->values = values;
    op->value_size = value_size;
    op->sizes = sizes;
    if (fs->hang_loads)
        op->polls_left = UINT32_MAX;
    return PKV_OK;
}

static pkv_status fs_save(void *user, uint64_t ticket, const char *key,
                          const void *value, size_t value_size)
{
    fs_store *fs = user;
    contract(key && value && value_size, "save arguments");
    if (fs->refuse_saves)
        return PKV_ERR_STORE;
    fs->saves++;
    fs_op *op = new_op(fs, ticket);
    op->save = 1;
    op->num_keys = 1;
    op->keys = xalloc(PKV_STORE_KEY_MAX);
    contract(strlen(key) < PKV_STORE_KEY_MAX, "key too long");
    strcpy(op->keys, key);
    op->value = value; /* read when it finishes, as a real store may */
    op->value_size = value_size;
    op->written = ++fs->data->clock;
    return PKV_OK;
}

/* Do the operation now; its status. */
static int32_t run(fs_store *fs, fs_op *op)
{
    if (op->save) {
        if (fs->fail_saves)
            return PKV_ERR_STORE;
        fs_put(fs->data, op->keys, op->value, op->value_size);
        fs_get(fs->data, op->keys)->written = op->written;
        return PKV_OK;
    }
    if (fs->fail_loads)
        return PKV_ERR_STORE;
    for (uint32_t i = 0; i < op->num_keys; i++) {
        const char *key = op->keys + (size_t)i * PKV_STORE_KEY_MAX;
        fs_entry *e = fs_get(fs->data, key);
        op->sizes[i] = e ? e->size : 0;
        if (e)
            memcpy((uint8_t *)op->values + (size_t)i * op->value_size,
                   e->value, e->size < op->value_size ? e->size
                                                      : op->value_size);
    }
    return PKV_OK;
}

static uint32_t fs_poll(void *user, pkv_store_done *done, uint32_t capacity)
{
    fs_store *fs = user;
    fs->polls++;
    uint32_t n = 0;
    for (size_t i = 0; i < fs->num_ops && n < capacity;) {
        fs_op *op = &fs->ops[i];
        if (op->polls_left == UINT32_MAX ||
            (op->polls_left > 0 && op->polls_left--)) {
            i++;
            continue;
        }
        done[n].ticket = op->ticket;
        done[n].status = run(fs, op);
        done[n].reserved0 = 0;
        n++;
        free(op->keys);
        *op = fs->ops[--fs->num_ops];
    }
    return n;
}

static void fs_cancel(void *user, uint64_t ticket)
{
    fs_store *fs = user;
    for (size_t i = 0; i < fs->num_ops; i++)
        if (fs->ops[i].ticket == ticket) {
            free(fs->ops[i].keys);
            fs->ops[i] = fs->ops[--fs->num_ops];
            fs->cancels++;
            return;
        }
    contract(0, "cancel of a ticket not in flight");
}

void fs_connect(fs_store *fs, fs_data *data, pkv_store *store)
{
    memset(fs, 0, sizeof *fs);
    fs->data = data;
    store->user = fs;
    store->load = fs_load;
    store->save = fs_save;
    store->poll = fs_poll;
    store->cancel = fs_cancel;
}

void fs_free(fs_store *fs)
{
    contract(fs->num_ops == 0, "operations left in flight");
    free(fs->ops);
    memset(fs, 0, sizeof *fs);
}
