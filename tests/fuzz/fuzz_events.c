/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for pkv-router's KV-events reader (examples/router/events.c:
 * rt_events_apply), the code that reads what a backend publishes over
 * ZeroMQ: msgpack KVEventBatches, hostile bytes like any from the network.
 *
 * The first input byte picks the mode. Bit 0 clear: the rest is one
 * batch's payload as it came off the wire. Bit 0 set: the rest drives a
 * builder that packs up to three batches with msgpack-c, in either of
 * msgspec's layouts (arrays or maps), with events of every tag, fields of
 * the right type and of wrong ones, missing ones, hashes of every kind
 * and length (few distinct values, so that chains, refreshes and removals
 * meet), token ids that do and do not fill their blocks, block sizes and
 * groups in and out of range; random bytes rarely spell those. Each batch
 * goes to one of two backends of an index that keeps at most a few
 * blocks each, so that the cap, the group a backend keeps and clearing
 * are all reached.
 *
 * Checked: no read or write outside the buffers (ASan), no leak
 * (LeakSanitizer); a batch is accepted (0) or refused (-1), and the
 * feed's counters say which; no backend keeps more blocks than the cap;
 * a prompt's match is at most its length and a whole number of the
 * backend's blocks.
 */
#include "fuzz_events.h"
#include "fuzz_check.h"
#include "fuzz_input.h"

#include "events.h"

#include <msgpack.h>

#include <string.h>

uint64_t pkv_fuzz_ops;

enum { BACKENDS = 2, MAX_KEPT = 8, BATCHES = 3, EVENTS = 4, PROBE = 48 };

static void pack_text(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

/* A block hash: mostly one of four small integers, else an integer of
 * any size or sign, bytes of 0 to 39 (past the 32 kept), nil or text. */
static void pack_hash(msgpack_packer *pk, bytes *b)
{
    unsigned c = take(b);
    switch (c % 16) {
    case 0:
        msgpack_pack_uint64(pk, (uint64_t)take(b) << 56 | take(b));
        break;
    case 1:
        msgpack_pack_int64(pk, -(int64_t)take(b) - 1);
        break;
    case 2: {
        uint8_t raw[40];
        size_t len = take(b) % sizeof raw;
        for (size_t i = 0; i < len; i++)
            raw[i] = (uint8_t)take(b);
        msgpack_pack_bin(pk, len);
        msgpack_pack_bin_body(pk, raw, len);
        break;
    }
    case 3:
        msgpack_pack_nil(pk);
        break;
    case 4:
        pack_text(pk, "h");
        break;
    default:
        msgpack_pack_uint64(pk, c / 16 % 4);
        break;
    }
}

/* A whole number field: small and in range mostly, else 0, huge,
 * negative, a float or text. */
static void pack_number(msgpack_packer *pk, bytes *b, unsigned small)
{
    unsigned c = take(b);
    switch (c % 8) {
    case 0:
        msgpack_pack_uint64(pk, 0);
        break;
    case 1:
        msgpack_pack_uint64(pk, UINT64_MAX - take(b));
        break;
    case 2:
        msgpack_pack_int64(pk, -1 - (int64_t)take(b));
        break;
    case 3:
        msgpack_pack_double(pk, 1.5);
        break;
    case 4:
        pack_text(pk, "1");
        break;
    default:
        msgpack_pack_uint64(pk, 1 + c / 8 % small);
        break;
    }
}

/* The fields of one event, in declaration order (events.h). */
enum {
    F_TAG,
    F_HASHES,
    F_PARENT,
    F_TOKENS,
    F_BLOCK_SIZE,
    F_LORA_ID,
    F_MEDIUM,
    F_LORA_NAME,
    F_EXTRA_KEYS,
    F_GROUP,
    F_KIND,
    F_WINDOW,
    STORED_FIELDS
};

static const char *const stored_names[STORED_FIELDS] = {
    "type",        "block_hashes", "parent_block_hash",
    "token_ids",   "block_size",   "lora_id",
    "medium",      "lora_name",    "extra_keys",
    "group_idx",   "kv_cache_spec_kind", "kv_cache_spec_sliding_window"};

/* BlockRemoved: tag, block_hashes, medium, group_idx. */
static const int removed_fields[] = {F_TAG, F_HASHES, F_MEDIUM, F_GROUP};

static void pack_tag(msgpack_packer *pk, unsigned tag)
{
    static const char *const tags[] = {"BlockStored", "BlockRemoved",
                                       "AllBlocksCleared", "Other"};
    if (tag < 4)
        pack_text(pk, tags[tag]);
    else
        msgpack_pack_uint64(pk, tag);
}

/* One field's value for an event of `blocks` blocks of `size` tokens. */
static void pack_field(msgpack_packer *pk, bytes *b, int fld, unsigned tag,
                       unsigned blocks, unsigned size)
{
    switch (fld) {
    case F_TAG:
        pack_tag(pk, tag);
        break;
    case F_HASHES:
        if (take(b) % 16 == 0) {
            pack_hash(pk, b); /* not an array */
            break;
        }
        msgpack_pack_array(pk, blocks);
        for (unsigned i = 0; i < blocks; i++)
            pack_hash(pk, b);
        break;
    case F_PARENT:
        pack_hash(pk, b);
        break;
    case F_TOKENS: {
        /* Mostly exactly blocks * size ids, else one more or less. */
        unsigned c = take(b);
        unsigned n = blocks * size + (c % 16 == 0 ? 1u : 0u);
        if (c % 16 == 1 && n > 0)
            n--;
        msgpack_pack_array(pk, n);
        for (unsigned i = 0; i < n; i++) {
            unsigned t = take(b);
            if (t % 64 == 63)
                msgpack_pack_int64(pk, -1);
            else if (t % 64 == 62)
                msgpack_pack_uint64(pk, (uint64_t)INT32_MAX + 1);
            else
                msgpack_pack_uint64(pk, t % 4);
        }
        break;
    }
    case F_BLOCK_SIZE:
        if (take(b) % 16 == 0)
            pack_number(pk, b, 5000);
        else
            msgpack_pack_uint64(pk, size);
        break;
    case F_GROUP: {
        unsigned c = take(b);
        if (c % 4 == 0)
            msgpack_pack_nil(pk);
        else if (c % 4 == 1)
            pack_number(pk, b, 2);
        else
            msgpack_pack_uint64(pk, 0);
        break;
    }
    case F_KIND: {
        static const char *const kinds[] = {"full_attention", "mla_attention",
                                            "sliding_window", ""};
        unsigned c = take(b) % 8;
        if (c >= 4)
            msgpack_pack_nil(pk);
        else
            pack_text(pk, kinds[c]);
        break;
    }
    case F_WINDOW:
        if (take(b) % 4 != 0)
            msgpack_pack_nil(pk);
        else
            pack_number(pk, b, 1024);
        break;
    default:
        msgpack_pack_nil(pk);
        break;
    }
}

/* One event: its tag, then as many of its fields as the input says (all,
 * mostly), as an array or a map. */
static void pack_event(msgpack_packer *pk, bytes *b, int maps)
{
    unsigned tag = take(b) % 6;
    unsigned blocks = 1 + take(b) % 3;
    unsigned size = 1 + take(b) % 3;
    const int *fields = NULL;
    size_t count = 1;
    int all[STORED_FIELDS];
    for (int i = 0; i < STORED_FIELDS; i++)
        all[i] = i;
    if (tag == 0) {
        fields = all;
        count = STORED_FIELDS;
    } else if (tag == 1) {
        fields = removed_fields;
        count = sizeof removed_fields / sizeof removed_fields[0];
    } else {
        fields = all;
    }
    unsigned c = take(b);
    if (c % 8 == 0)
        count = c / 8 % (count + 1);
    if (maps)
        msgpack_pack_map(pk, count);
    else
        msgpack_pack_array(pk, count);
    for (size_t i = 0; i < count; i++) {
        if (maps)
            pack_text(pk, stored_names[fields[i]]);
        pack_field(pk, b, fields[i], tag, blocks, size);
    }
}

/* A batch: [ts, events] or {"ts", "events"}, the events mostly an
 * array. */
static void pack_batch(msgpack_packer *pk, bytes *b)
{
    int maps = take(b) % 2;
    unsigned events = take(b) % (EVENTS + 1);
    if (maps) {
        msgpack_pack_map(pk, 2);
        pack_text(pk, "ts");
    } else {
        msgpack_pack_array(pk, 2);
    }
    msgpack_pack_double(pk, 0.5);
    if (maps)
        pack_text(pk, "events");
    if (take(b) % 16 == 0) {
        msgpack_pack_nil(pk);
        return;
    }
    msgpack_pack_array(pk, events);
    for (unsigned i = 0; i < events; i++)
        pack_event(pk, b, maps);
}

/* Apply one payload to backend f->backend and check what may be. */
static void apply(rt_index *x, rt_feed *f, const void *payload, size_t len)
{
    uint64_t batches = f->batches, bad = f->bad;
    int rc = rt_events_apply(x, f, payload, len);
    CHECK(rc == 0 || rc == -1);
    CHECK(f->batches == batches + 1);
    CHECK(f->bad == bad + (rc != 0));
    int32_t probe[PROBE];
    for (uint32_t i = 0; i < PROBE; i++)
        probe[i] = (int32_t)(i % 4);
    for (uint32_t b = 0; b < BACKENDS; b++) {
        CHECK(rt_index_count(x, b) <= MAX_KEPT);
        uint32_t size = x->tables[b].block_size;
        uint32_t got = rt_index_match(x, b, probe, PROBE);
        CHECK(got <= PROBE);
        CHECK(size == 0 ? got == 0 : got % size == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pkv_fuzz_ops++;
    if (size == 0)
        return 0;
    rt_index x;
    CHECK(rt_index_init(&x, BACKENDS, MAX_KEPT) == 0);
    rt_feed feeds[BACKENDS];
    for (uint32_t b = 0; b < BACKENDS; b++)
        feeds[b] = (rt_feed){.backend = b, .group = RT_GROUP_UNSET};
    bytes in = {data + 1, size - 1};
    if ((data[0] & 1) == 0) {
        apply(&x, &feeds[data[0] >> 1 & 1], in.p, in.n);
    } else {
        for (int i = 0; i < BATCHES && in.n > 0; i++) {
            rt_feed *f = &feeds[take(&in) % BACKENDS];
            msgpack_sbuffer buf;
            msgpack_sbuffer_init(&buf);
            msgpack_packer pk;
            msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
            pack_batch(&pk, &in);
            apply(&x, f, buf.data, buf.size);
            msgpack_sbuffer_destroy(&buf);
        }
    }
    rt_index_free(&x);
    return 0;
}
