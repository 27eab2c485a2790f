/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the public engine API on the CPU backend. The input picks
 * a small engine (geometry, KV dtype, block size, attention windows: none,
 * one for every layer, a window and a full layer, or two windows and no
 * full layer over 2 or 4 layers, with hybrid memory's groups or without,
 * a pool of a few blocks so that preemption happens, recompute or swap
 * with a host budget from under one block up, FCFS or priority, quotas,
 * chunking knobs) and then a sequence of
 * operations: add (prompts over a tiny alphabet, often a prefix of an
 * earlier one, so that prefix hits happen), abort (live, ended and
 * never-issued ids), fork (at valid and invalid moments), truncate (to
 * every length, 0 and one too many included), full steps (with
 * stop flags, NaN K/V, and bad calls in the middle of the step), bad calls
 * between steps, block-table reads; with a KV store (the in-process one
 * of store_fake.h) on half the inputs: loads and saves late by a few
 * polls, refused or failed, values damaged or evicted in the store;
 * with a deployment key (pkv_engine_params.seal_key) on a quarter of
 * them, so that store values, moves and reloads are sealed and damaged
 * store values go through the seal's checks; exports and saved prefix
 * caches, sealed or not, with a byte flipped or cut short where the input
 * says (refused, nothing changed). At the end the engine is stepped until
 * it has no work.
 *
 * Checked (check_host.h): every batch against the host's record of each
 * sequence; every output row against the dense reference (tight for f32
 * KV, loose for f16 and u8); every id ends exactly once, for the expected
 * reason, in the batch after it ended; after every operation, the pool's
 * states and counters, ref counts equal to the number of tables holding
 * each block, each running table covering exactly its computed tokens, the
 * stats; a bad call returns its documented status and changes nothing; at
 * the end the pool is idle.
 */
#ifdef PKV_FUZZ_REDIS
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#endif
#include "fuzz_engine.h"

#include "../check_host.h"
#include "../store_fake.h"
#include "../hash_model.h"

#include "engine.h"
#include "kv/groups.h"
#include "seqs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef PKV_FUZZ_REDIS
#include "pkv/pkv_redis.h"
#include <time.h>
#endif

enum { MAX_OPS = 400, RING = 8, MAX_PROMPT = 64, MAX_DRAIN_STEPS = 20000 };

uint64_t pkv_fuzz_ops;

typedef struct reader {
    const uint8_t *data;
    size_t size;
    size_t pos;
} reader;

typedef struct world {
    reader in;
    ch_host host;
    uint32_t alpha; /* prompt tokens are 0 .. alpha - 1 */
    int32_t ring[RING][MAX_PROMPT];
    uint32_t ring_len[RING];
    uint32_t ring_n, ring_next;
    pkv__block *before; /* pool snapshot for "nothing changed" */
    uint32_t layer_windows[4];
    int hybrid; /* hybrid memory asked for (groups: when windows differ) */
    int windowed; /* hybrid memory with a window on every layer */
    /* The KV store of this input, when it has one. */
    int has_store;
    fs_data store_data;
    fs_store store_fake;
    pkv_store store;
    void *redis; /* a pkv_redis instead of the fake (PKV_FUZZ_REDIS) */
} world;

static world W;

/* Totals over every input, printed at exit when PKV_FUZZ_SUMMARY is set:
 * what the random inputs reached. */
static struct totals {
    uint64_t inputs, rows, steps, ended, preemptions, swap_outs, hit_tokens,
        forks, truncations, shared_cuts, moves, drafts, drafts_run,
        drafts_accepted, reloads, store_inputs, store_hit_blocks,
        store_saves, store_rejected, store_faults, hybrid_inputs,
        windowed_inputs, windowed_swaps, layer_sized, sealed_inputs,
        tampered;
    double max_error[5]; /* by pkv_kv_dtype */
} TOT;

static void print_totals(void)
{
    fprintf(stderr,
            "fuzz_engine: %llu inputs, %llu steps, %llu rows checked, %llu "
            "ended, %llu preemptions, %llu swap-outs, %llu prefix hit "
            "tokens, %llu forks, %llu truncations (%llu inside a shared or "
            "cached block), %llu moves, %llu drafts "
            "proposed, %llu run, %llu accepted, %llu prefix cache reloads; "
            "%llu inputs with a store: %llu blocks loaded, %llu saved, "
            "%llu rejected, %llu store faults; %llu inputs in hybrid "
            "memory, %llu of them with no full layer (%llu swap-outs), "
            "%llu with num_blocks over every layer; "
            "%llu inputs sealed, %llu exports or prefix caches "
            "tampered with; max error f32 %.3g f16 "
            "%.3g u8 %.3g u4 %.3g u8k-u4v %.3g\n",
            (unsigned long long)TOT.inputs, (unsigned long long)TOT.steps,
            (unsigned long long)TOT.rows, (unsigned long long)TOT.ended,
            (unsigned long long)TOT.preemptions,
            (unsigned long long)TOT.swap_outs,
            (unsigned long long)TOT.hit_tokens, (unsigned long long)TOT.forks,
            (unsigned long long)TOT.truncations,
            (unsigned long long)TOT.shared_cuts,
            (unsigned long long)TOT.moves, (unsigned long long)TOT.drafts,
            (unsigned long long)TOT.drafts_run,
            (unsigned long long)TOT.drafts_accepted,
            (unsigned long long)TOT.reloads,
            (unsigned long long)TOT.store_inputs,
            (unsigned long long)TOT.store_hit_blocks,
            (unsigned long long)TOT.store_saves,
            (unsigned long long)TOT.store_rejected,
            (unsigned long long)TOT.store_faults,
            (unsigned long long)TOT.hybrid_inputs,
            (unsigned long long)TOT.windowed_inputs,
            (unsigned long long)TOT.windowed_swaps,
            (unsigned long long)TOT.layer_sized,
            (unsigned long long)TOT.sealed_inputs,
            (unsigned long long)TOT.tampered, TOT.max_error[0],
            TOT.max_error[1], TOT.max_error[2], TOT.max_error[3],
            TOT.max_error[4]);
}

/* What a failing input set up and where the sequences are, for triage. */
static void dump(void)
{
    const pkv_engine *e = W.host.engine;
    if (e == NULL)
        return;
    const pkv_engine_params *p = &e->params;
    fprintf(stderr,
            "fuzz_engine: layers %u heads %u/%u dim %u window %u (layer 0: "
            "%u) bs %u "
            "kv %d rollback %u blocks %u (free %u cached %u) mode %d "
            "swap %llu policy %d "
            "quota seq %u tenant %u threshold %u max_seqs %u budget %u "
            "watermark %g (%u blocks) max_len %u vocab %u\n",
            p->num_layers, p->num_q_heads, p->num_kv_heads, p->head_dim,
            p->sliding_window, e->layer_windows[0], p->block_size,
            (int)p->kv_dtype, p->u8_rollback_blocks, p->num_blocks,
            e->kv.pool.num_free, e->kv.pool.num_cached_free,
            (int)p->preempt_mode, (unsigned long long)p->swap_bytes,
            (int)p->policy, p->max_blocks_per_seq, p->max_blocks_per_tenant,
            p->long_prefill_threshold, p->max_num_seqs, p->max_batch_tokens,
            (double)p->watermark, e->watermark_blocks, p->max_model_len,
            p->vocab_size);
    fprintf(stderr, "  windows");
    for (uint32_t l = 0; l < p->num_layers; l++)
        fprintf(stderr, " %u", e->layer_windows[l]);
    fprintf(stderr, "; %u groups of %u layers\n", e->kv.groups.num_groups,
            e->kv.groups.slots);
    const pkv__seq_list *lists[] = {&e->seqs.running, &e->seqs.waiting,
                                    &e->seqs.swapped};
    const char *names[] = {"running", "waiting", "swapped"};
    for (int l = 0; l < 3; l++)
        for (uint32_t i = 0; i < lists[l]->count; i++) {
            const pkv__seq *s = lists[l]->items[i];
            fprintf(stderr,
                    "  %s seq %llu: tokens %u (prompt %u) computed %u "
                    "blocks %u tenant %u priority %d protect %u\n",
                    names[l], (unsigned long long)s->id, s->num_tokens,
                    s->prompt_len, s->num_computed, pkv__kv_blocks(&s->kv),
                    s->tenant, (int)s->order.priority, s->protect);
        }
}

static void fail(const char *message)
{
    fprintf(stderr, "fuzz_engine: %s\n", message);
    dump();
    abort();
}

#define CHECK(cond)                                                      \
    do {                                                                 \
        if (!(cond))                                                     \
            ch_failf(&W.host, "fuzz_engine.c:%d: check failed: %s",      \
                     __LINE__, #cond);                                   \
    } while (0)

static uint8_t next_byte(reader *r)
{
    return r->pos < r->size ? r->data[r->pos++] : 0;
}

/* --------------------------------------------------------------- snapshot */

typedef struct snapshot {
    pkv_engine_stats stats;
    int in_step;
    uint32_t layers_left;
    uint64_t last_id, live;
    uint8_t layer_done[4];
} snapshot;

static void take(world *w, snapshot *s)
{
    pkv_engine *e = w->host.engine;
    memset(s, 0, sizeof *s);
    s->stats.struct_size = sizeof s->stats;
    CHECK(pkv_engine_get_stats(e, &s->stats) == PKV_OK);
    s->in_step = e->step.in_step;
    s->layers_left = e->step.layers_left;
    s->last_id = e->inbox.last_id;
    s->live = e->inbox.live;
    memcpy(s->layer_done, e->step.layer_done, e->params.num_layers);
    memcpy(w->before, e->kv.pool.blocks,
           e->kv.pool.num_blocks * sizeof *w->before);
}

/* A failed call changed nothing. */
static void unchanged(world *w, const snapshot *s, const char *call)
{
    snapshot now;
    pkv__block *saved = w->before;
    pkv_engine *e = w->host.engine;
    memset(&now, 0, sizeof now);
    now.stats.struct_size = sizeof now.stats;
    CHECK(pkv_engine_get_stats(e, &now.stats) == PKV_OK);
    now.in_step = e->step.in_step;
    now.layers_left = e->step.layers_left;
    now.last_id = e->inbox.last_id;
    now.live = e->inbox.live;
    memcpy(now.layer_done, e->step.layer_done, e->params.num_layers);
    if (memcmp(&now, s, sizeof now) != 0 ||
        memcmp(saved, e->kv.pool.blocks,
               e->kv.pool.num_blocks * sizeof *saved) != 0)
        ch_failf(&w->host, "a failed %s changed the engine", call);
}

/* Run a call expected to fail with `want`, then check nothing changed. */
#define EXPECT_FAIL(w, want, call)                                        \
    do {                                                                  \
        snapshot snap_;                                                   \
        take(w, &snap_);                                                  \
        pkv_status got_ = (call);                                         \
        if (got_ != (want))                                               \
            ch_failf(&(w)->host, "%s returned %s; expected %s", #call,    \
                     pkv_status_name(got_), pkv_status_name(want));       \
        unchanged(w, &snap_, #call);                                      \
    } while (0)

/* ------------------------------------------------------------------ setup */

#ifdef PKV_FUZZ_REDIS
static void idle(void)
{
    struct timespec t = {0, 50000};
    nanosleep(&t, NULL);
}
#endif

/* With PKV_FUZZ_REDIS_PORT set (a build with PKV_FUZZ_REDIS), the store is
 * a redis-server on that loopback port, each input under keys of its own:
 * the fake's faults then do nothing, the real server's timing is the
 * fault. */
static void connect_redis(world *w)
{
#ifdef PKV_FUZZ_REDIS
    const char *port = getenv("PKV_FUZZ_REDIS_PORT");
    if (port == NULL)
        return;
    pkv_redis_params rp;
    CHECK(pkv_redis_params_init(&rp) == PKV_OK);
    rp.port = (uint32_t)atoi(port);
    char prefix[32];
    snprintf(prefix, sizeof prefix, "fuzz%llu:",
             (unsigned long long)TOT.inputs);
    rp.key_prefix = prefix;
    pkv_redis *r = NULL;
    CHECK(pkv_redis_create(&rp, &r) == PKV_OK);
    CHECK(pkv_redis_store(r, &w->store) == PKV_OK);
    w->redis = r;
#else
    (void)w;
#endif
}

static const float watermarks[4] = {0.0f, 0.01f, 0.1f, 0.3f};

static int create(world *w)
{
    reader *r = &w->in;
    pkv_engine_params p;
    CHECK(pkv_engine_params_init(&p) == PKV_OK);
    uint8_t g = next_byte(r);
    p.num_layers = 1u + g % 2u;
    p.num_kv_heads = 1u + (g >> 1) % 2u;
    p.num_q_heads = p.num_kv_heads * (1u + (g >> 2) % 2u);
    p.head_dim = 4u << ((g >> 3) % 2u);
    uint8_t bs = next_byte(r);
    p.block_size = 1u << (bs % 5u);
    /* No window; one for every layer; (two layers) a window on the first
     * and full attention on the second, as a model that mixes them; or
     * two windows and no full layer, alternating over two or four
     * layers (Mistral's sliding window on every layer, with windows that
     * differ), down to a window of one token. */
    uint32_t window = 1u + (uint32_t)(g >> 6) * 3u;
    uint32_t other = 1u + (uint32_t)(bs / 5u) % 24u;
    p.sliding_window = (g >> 4) % 4u == 3 ? window : 0;
    if ((g >> 4) % 4u == 2 && p.num_layers == 2) {
        w->layer_windows[0] = window;
        w->layer_windows[1] = 0;
        p.layer_windows = w->layer_windows;
    } else if ((g >> 4) % 4u == 1) {
        p.num_layers = 2u + 2u * (g % 2u == 0);
        for (uint32_t l = 0; l < p.num_layers; l++)
            w->layer_windows[l] = l % 2 ? other : window;
        p.layer_windows = w->layer_windows;
    }
    uint8_t kv = next_byte(r);
    p.kv_dtype = kv % 5;
    p.key_quant = (kv >> 2) % 3;
    p.value_quant = (kv >> 4) % 3;
    p.u8_rollback_blocks = (uint32_t)(kv >> 7) * (1u + (uint32_t)(g >> 7));
    w->host.f16_tensors = 0;
    uint8_t pool = next_byte(r);
    p.num_blocks = 2u + pool % 40u; /* blocks of the pool */
    uint8_t pre = next_byte(r);
    p.preempt_mode = pre % 2;
    /* Swap on half the inputs, its host budget from none through less
     * than one block (64 bytes) to some tens of them. */
    p.swap_bytes = (uint64_t)((pre >> 1) % 8u) << (6u + (pre >> 4) % 8u);
    p.policy = (pre >> 7) % 2;
    uint8_t quota = next_byte(r);
    p.max_blocks_per_seq = quota % 4 == 0 ? 1u + (quota >> 2) % 8u : 0;
    p.max_blocks_per_tenant =
        (quota >> 5) % 2 == 0 ? 0 : 1u + (uint32_t)(quota >> 6) * 3u;
    uint8_t sched = next_byte(r);
    p.long_prefill_threshold = sched % 4 == 0 ? 1u + (sched >> 2) % 8u : 0;
    p.max_num_seqs = 1u + (sched >> 5) % 6u;
    uint8_t budget = next_byte(r);
    p.max_batch_tokens = 1u + budget % 24u;
    p.watermark = watermarks[(budget >> 6) % 4u];
    /* A key on a quarter of the inputs (any 32 bytes will do). */
    static const uint8_t key[32] = {7, 1, 4, 9, 2, 8};
    if ((budget >> 4) % 4u == 3) {
        p.seal_key = key;
        TOT.sealed_inputs++;
    }
    uint8_t len = next_byte(r);
    p.max_model_len = 4u + len % 45u;
    p.vocab_size = 2u + (len >> 2) % 14u;
    p.backend = PKV_BACKEND_KIND_CPU;
    w->alpha = 1u + next_byte(r) % 3u;
    if (w->alpha > p.vocab_size)
        w->alpha = p.vocab_size;
    /* A store on odd bytes: late, failing, saving generated blocks, with
     * a load budget of one or two blocks. No hung operations: timeouts
     * would make a replay depend on the clock. */
    uint8_t st = next_byte(r);
    w->has_store = st % 2;
    if (w->has_store) {
        CHECK(pkv_store_init(&w->store) == PKV_OK);
        fs_connect(&w->store_fake, &w->store_data, &w->store);
        connect_redis(w);
        w->store_fake.delay_polls = (st >> 1) % 4u;
        w->store_fake.fail_loads = (st >> 3) % 8 == 0;
        w->store_fake.fail_saves = (st >> 4) % 8 == 0;
        w->store_fake.refuse_saves = (st >> 4) % 8 == 1;
        w->store.flags = (st >> 6) % 2 ? PKV_STORE_SAVE_GENERATED : 0;
        if ((st >> 7) % 2) /* below one value: nothing is asked */
            w->store.max_load_bytes = 1u + (st >> 5) % 2u;
        p.store = &w->store;
        TOT.store_inputs++;
    }
    /* Mixed windows in hybrid memory on odd bits: a table per window,
     * the windowed one dropping blocks; every token kept otherwise. The
     * pool drawn above counts blocks of the pool: kv_memory's num_blocks
     * counts blocks over every layer, as many of the pool's as there are
     * groups, so on odd pool bytes whose pool they divide it says so;
     * otherwise 0.2.0's hybrid_memory counts the pool's blocks. */
    w->hybrid = p.layer_windows != NULL &&
                (w->has_store ? (st >> 5) % 2 : (st >> 1) % 2);
    p.kv_memory =
        w->hybrid ? PKV_KV_MEMORY_HYBRID : PKV_KV_MEMORY_EVERY_TOKEN;
    uint32_t groups = p.num_layers / pkv__groups_slots(&p);
    if (w->hybrid && (pool / 40u) % 2u == 1 && p.num_blocks % groups == 0 &&
        p.num_blocks / groups >= 2) {
        p.num_blocks /= groups;
        TOT.layer_sized++;
    } else {
        p.hybrid_memory = (uint32_t)w->hybrid;
    }
    TOT.hybrid_inputs += (uint64_t)w->hybrid;
    w->windowed = w->hybrid && (g >> 4) % 4u == 1;
    TOT.windowed_inputs += (uint64_t)w->windowed;

    /* f32 KV: within 1e-4 of the dense reference; f16 rounds every element
     * (tensors may then be f16 too); u8 and u4 quantize each frozen block
     * (u4 steps are 17 times u8's). */
    double tolerance = p.kv_dtype == PKV_KV_DTYPE_F32   ? 1e-4
                       : p.kv_dtype == PKV_KV_DTYPE_F16 ? 2e-3
                       : p.kv_dtype == PKV_KV_DTYPE_U8  ? 0.03
                                                        : 0.5;
    ch_init(&w->host, &p, tolerance, fail);
#ifdef PKV_FUZZ_REDIS
    if (w->redis != NULL)
        w->host.idle = idle;
#endif
    w->host.f16_tensors = p.kv_dtype != PKV_KV_DTYPE_F32 && (kv >> 6) % 2 == 1;
    w->before = malloc(w->host.engine->kv.pool.num_blocks * sizeof *w->before);
    CHECK(w->before != NULL);
    w->ring_n = 0;
    w->ring_next = 0;
    return 1;
}

/* -------------------------------------------------------------------- ops */

static void op_add(world *w)
{
    reader *r = &w->in;
    const pkv_engine_params *p = &w->host.params;
    int32_t prompt[MAX_PROMPT];
    uint8_t how = next_byte(r), len = next_byte(r);
    uint32_t limit = p->max_model_len - 1;
    if (limit > MAX_PROMPT)
        limit = MAX_PROMPT;
    uint32_t n = 0;
    if (how % 4 != 0 && w->ring_n > 0) {
        uint32_t from = (uint32_t)(how >> 2) % w->ring_n;
        n = (uint32_t)((uint64_t)w->ring_len[from] * len / 255u);
        memcpy(prompt, w->ring[from], n * sizeof *prompt);
        len = next_byte(r);
    }
    /* Mostly short, sometimes up to the limit. */
    uint32_t extra = 1u + (len % 8 == 7 ? (uint32_t)len : len % 6u);
    if (n + extra > limit)
        extra = limit > n ? limit - n : 0;
    uint32_t seed = 0x9e3779b9u * ((uint32_t)next_byte(r) + 1u);
    for (uint32_t i = 0; i < extra; i++) {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        prompt[n + i] = (int32_t)((seed >> 16) % w->alpha);
    }
    n += extra;
    if (n == 0)
        return;
    memcpy(w->ring[w->ring_next], prompt, n * sizeof *prompt);
    w->ring_len[w->ring_next] = n;
    w->ring_next = (w->ring_next + 1) % RING;
    if (w->ring_n < RING)
        w->ring_n++;

    uint8_t k = next_byte(r);
    pkv_seq_params sp;
    CHECK(pkv_seq_params_init(&sp) == PKV_OK);
    sp.prompt = prompt;
    sp.prompt_len = n;
    sp.max_new_tokens = k % 8u;
    sp.priority = (int32_t)((k >> 3) % 5u) - 2;
    sp.tenant = (k >> 5) % 3u;
    sp.cache_salt = (k >> 7) % 2u;
    pkv_seq_id id = 0;
    pkv_status st = ch_add(&w->host, &sp, &id);
    if (st != PKV_OK)
        ch_failf(&w->host, "add of %u tokens: %s", n, pkv_last_error());
}

/* An id: often live or ended, sometimes never issued (0 or past the last). */
static pkv_seq_id pick_id(world *w)
{
    uint8_t b = next_byte(&w->in);
    uint64_t last = w->host.last_id;
    if (b % 16 == 0)
        return b % 32 == 0 ? 0 : last + 1 + b / 32;
    if (last == 0)
        return 1;
    return last - (uint64_t)(b >> 1) % last;
}

static void op_abort(world *w)
{
    ch_abort(&w->host, pick_id(w));
}

static void op_fork(world *w)
{
    pkv_seq_id parent = pick_id(w);
    uint8_t t = next_byte(&w->in);
    uint32_t vocab = w->host.params.vocab_size;
    int32_t last = t % 4 == 0   ? -1
                   : t % 4 == 3 ? (int32_t)(vocab + t / 4)
                                : (int32_t)((uint32_t)(t / 4) % vocab);
    pkv_seq_id child = 0;
    if (ch_fork(&w->host, parent, last, &child) == PKV_OK)
        TOT.forks++;
}

/* A cut to a length from 0 to one past the sequence's tokens. */
/* Whether a cut of id to n tokens keeps part of a block that a fork or
 * the prefix cache also holds (that block must stay as it was). */
static int cuts_inside_shared(const pkv_engine *e, pkv_seq_id id, uint32_t n)
{
    const pkv__seq *s = e->step.in_step ? NULL : pkv__seqs_find(&e->seqs, id);
    if (s == NULL || n == 0 || n > s->num_tokens)
        return 0;
    uint32_t keep = n - 1 < s->num_computed ? n - 1 : s->num_computed;
    uint32_t bs = e->params.block_size;
    if (keep % bs == 0 || keep / bs >= pkv__kv_blocks(&s->kv))
        return 0;
    const pkv__block *k = &e->kv.pool.blocks[s->kv.tables[0].blocks[keep / bs]];
    return k->ref_count > 1 || k->cached;
}

static void op_truncate(world *w)
{
    pkv_seq_id id = pick_id(w);
    uint8_t b = next_byte(&w->in);
    const ch_seq *s = ch_find(&w->host, id);
    uint32_t have = s != NULL ? s->num_tokens : 8;
    /* Anywhere (and out of range), or within the last two blocks, where
     * a U8 rollback window can keep the rows. */
    uint32_t back = (uint32_t)(b >> 1) % (2 * w->host.params.block_size + 1);
    uint32_t n = b % 2 ? (uint32_t)(b >> 1) % (have + 2)
                       : (have > back ? have - back : 1);
    int shared = cuts_inside_shared(w->host.engine, id, n);
    if (ch_truncate(&w->host, id, n) == PKV_OK) {
        TOT.truncations++;
        TOT.shared_cuts += (uint64_t)shared;
    }
}

/* Export a sequence and import it as a copy into the same engine. */
static void op_move(world *w)
{
    pkv_seq_id copy;
    if (ch_move(&w->host, pick_id(w), &copy) == PKV_OK)
        TOT.moves++;
}

/* Drafts for a sequence: its true continuation (hm_sample) with some
 * tokens wrong, 0 to 7 of them, sometimes out of range. */
static void op_propose(world *w)
{
    pkv_seq_id id = pick_id(w);
    uint8_t b = next_byte(&w->in);
    uint32_t vocab = w->host.params.vocab_size;
    const ch_seq *s = ch_find(&w->host, id);
    int32_t drafts[8];
    uint32_t n = b % 8;
    int32_t last = s != NULL && s->num_tokens > s->drafts
                       ? s->tokens[s->num_tokens - s->drafts - 1]
                       : 0;
    uint32_t pos = s != NULL ? s->num_tokens - s->drafts - 1 : 0;
    for (uint32_t i = 0; i < n; i++, pos++) {
        uint8_t r = next_byte(&w->in);
        int32_t truth = hm_sample(last, pos, vocab);
        drafts[i] = r % 4 != 0    ? truth
                    : r % 64 == 0 ? (int32_t)vocab
                                  : (int32_t)((uint32_t)(truth + 1) % vocab);
        last = drafts[i];
    }
    if (ch_propose(&w->host, id, drafts, n) == PKV_OK)
        TOT.drafts += n;
}

/* Save the prefix cache and load it into the same engine: every saved
 * block is cached already, so nothing loads and nothing changes. */
static void op_reload(world *w)
{
    pkv_engine *e = w->host.engine;
    size_t size = 0;
    pkv_status st = pkv_engine_save_prefix_cache(e, NULL, 0, &size);
    if (e->step.in_step) {
        CHECK(st == PKV_ERR_BAD_STATE);
        return;
    }
    CHECK(st == PKV_OK && size >= 64);
    uint8_t *data = malloc(size);
    CHECK(data != NULL);
    size_t got = 0;
    CHECK(pkv_engine_save_prefix_cache(e, data, size, &got) == PKV_OK &&
          got == size);
    uint32_t free_before = e->kv.pool.num_free, loaded = 7;
    CHECK(pkv_engine_load_prefix_cache(e, data, size, &loaded) == PKV_OK);
    CHECK(loaded == 0 && e->kv.pool.num_free == free_before);
    free(data);
    TOT.reloads++;
}

/* An export or the saved prefix cache (sealed with a key) with a byte
 * flipped or cut short where the input says, handed back: refused (a
 * damaged file, or one that claims another version), nothing changed. */
static void op_tamper(world *w)
{
    pkv_engine *e = w->host.engine;
    uint8_t how = next_byte(&w->in), hi = next_byte(&w->in),
            lo = next_byte(&w->in);
    int prefix = how % 2;
    pkv_seq_id id = prefix ? 0 : pick_id(w);
    size_t size = 0, got = 0;
    pkv_status st = prefix ? pkv_engine_save_prefix_cache(e, NULL, 0, &size)
                           : pkv_seq_export(e, id, NULL, 0, &size);
    if (st != PKV_OK)
        return; /* in a step, or no such sequence: op_move's part */
    uint8_t *data = malloc(size);
    CHECK(data != NULL);
    st = prefix ? pkv_engine_save_prefix_cache(e, data, size, &got)
                : pkv_seq_export(e, id, data, size, &got);
    CHECK(st == PKV_OK && got == size);
    size_t at = ((size_t)hi << 8 | lo) % size;
    if ((how >> 1) % 2)
        data[at] ^= (uint8_t)(1u << (how >> 2) % 8u);
    else
        size = at;
    snapshot snap;
    take(w, &snap);
    pkv_seq_id copy = 7;
    uint32_t loaded = 7;
    st = prefix ? pkv_engine_load_prefix_cache(e, data, size, &loaded)
                : pkv_seq_import(e, NULL, data, size, &copy);
    if (st != PKV_ERR_INVALID_ARGUMENT && st != PKV_ERR_UNSUPPORTED)
        ch_failf(&w->host, "a %s %s at byte %zu: %s",
                 prefix ? "prefix cache" : "export",
                 (how >> 1) % 2 ? "flipped" : "cut", at,
                 pkv_status_name(st));
    CHECK(copy == (prefix ? 7 : 0) && loaded == (prefix ? 0 : 7));
    unchanged(w, &snap, prefix ? "load_prefix_cache" : "seq_import");
    free(data);
    TOT.tampered++;
}

/* Damage or evict a value in the store (or make loads fail for a
 * while): the engine must compute those blocks. */
static void op_store_fault(world *w)
{
    uint8_t b = next_byte(&w->in), at = next_byte(&w->in);
    fs_data *d = &w->store_data;
    if (!w->has_store)
        return;
    TOT.store_faults++;
    if (b % 4 == 3) {
        w->store_fake.fail_loads = !w->store_fake.fail_loads;
        return;
    }
    if (d->count == 0)
        return;
    fs_entry *e = &d->entries[(size_t)at % d->count];
    if (b % 4 == 0)
        fs_delete(d, e->key);
    else if (b % 4 == 1)
        e->value[((size_t)b * 131u + at) % e->size] ^= (uint8_t)(1u << (b % 8));
    else if (e->size > 1)
        e->size -= 1u + (size_t)at % (e->size - 1); /* truncated */
}

static void op_block_table(world *w)
{
    pkv_engine *e = w->host.engine;
    pkv_seq_id id = pick_id(w);
    const uint32_t *blocks = NULL;
    uint32_t nb = 7, nt = 7;
    const pkv__seq *s = pkv__seqs_find(&e->seqs, id);
    pkv_status st = pkv_engine_get_block_table(e, id, &blocks, &nb, &nt);
    if (s == NULL) {
        /* Added and not yet seen by a step: live, with no blocks. */
        CHECK(st == (pkv__inbox_queued(&e->inbox, id) ? PKV_OK
                                                     : PKV_ERR_NOT_FOUND));
        CHECK(blocks == NULL && nb == 0 && nt == 0);
        return;
    }
    CHECK(st == PKV_OK);
    CHECK(nb == pkv__kv_blocks(&s->kv) && nt == pkv__kv_tokens(&s->kv));
    CHECK(nb == 0 ||
          memcmp(blocks, s->kv.tables[0].blocks, nb * sizeof *blocks) == 0);
}

/* A well-formed host tensor over the host's scratch. */
static pkv_tensor good_tensor(world *w, int kv)
{
    ch_host *h = &w->host;
    pkv_tensor t;
    memset(&t, 0, sizeof t);
    t.struct_size = sizeof t;
    t.dtype = PKV_TENSOR_DTYPE_F32;
    t.memory = PKV_TENSOR_MEMORY_HOST;
    t.rows = h->batch != NULL ? h->batch->num_tokens : 0;
    t.heads = kv ? h->params.num_kv_heads : h->params.num_q_heads;
    t.head_dim = h->params.head_dim;
    t.data = kv ? h->k : h->q;
    if (t.data == NULL)
        t.data = &W; /* never read: rows is 0 or the call fails first */
    return t;
}

/* Bad calls between steps. */
static void op_bad(world *w)
{
    pkv_engine *e = w->host.engine;
    const pkv_engine_params *p = &w->host.params;
    uint8_t b = next_byte(&w->in);
    pkv_tensor q = good_tensor(w, 0), k = good_tensor(w, 1);
    int32_t prompt[MAX_PROMPT + 1];
    memset(prompt, 0, sizeof prompt);
    pkv_seq_params sp;
    CHECK(pkv_seq_params_init(&sp) == PKV_OK);
    sp.prompt = prompt;
    sp.prompt_len = 1u + (uint32_t)(b >> 4) % 3u;
    pkv_seq_id id = 99;
    pkv_engine_stats st;
    memset(&st, 0, sizeof st);
    const uint32_t *blocks;
    uint32_t n1, n2;
    switch (b % 12) {
    case 0:
        EXPECT_FAIL(w, PKV_ERR_BAD_STATE,
                    pkv_engine_attend(e, 0, &q, &k, &k, &q));
        break;
    case 1:
        EXPECT_FAIL(w, PKV_ERR_BAD_STATE,
                    pkv_engine_step_end(e, NULL, NULL, 0));
        break;
    case 2:
        prompt[sp.prompt_len - 1] = (b >> 6) % 2 ? -1 : (int32_t)p->vocab_size;
        EXPECT_FAIL(w, PKV_ERR_INVALID_ARGUMENT, pkv_seq_add(e, &sp, &id));
        CHECK(id == 0);
        break;
    case 3:
        sp.struct_size = (b >> 6) % 2 ? 0 : (uint32_t)sizeof sp + 8;
        EXPECT_FAIL(w, PKV_ERR_STRUCT_SIZE, pkv_seq_add(e, &sp, &id));
        CHECK(id == 0);
        break;
    case 4:
        if ((b >> 6) % 3 == 0)
            sp.prompt_len = 0;
        else if ((b >> 6) % 3 == 1)
            sp.prompt = NULL;
        else
            sp.prompt_len = p->max_model_len <= MAX_PROMPT + 1
                                ? p->max_model_len
                                : MAX_PROMPT + 1;
        if (sp.prompt_len >= p->max_model_len || sp.prompt_len == 0 ||
            sp.prompt == NULL) {
            EXPECT_FAIL(w, PKV_ERR_INVALID_ARGUMENT,
                        pkv_seq_add(e, &sp, &id));
            CHECK(id == 0);
        }
        break;
    case 5:
        sp.flags = 1u << (b >> 4) % 32u;
        EXPECT_FAIL(w, PKV_ERR_INVALID_ARGUMENT, pkv_seq_add(e, &sp, &id));
        break;
    case 6:
        st.struct_size = (b >> 6) % 2 ? 4 : (uint32_t)sizeof st + 4;
        EXPECT_FAIL(w, PKV_ERR_STRUCT_SIZE, pkv_engine_get_stats(e, &st));
        break;
    case 7:
        EXPECT_FAIL(w, PKV_ERR_INVALID_ARGUMENT,
                    pkv_engine_step_begin(e, NULL));
        break;
    case 8:
        EXPECT_FAIL(w, PKV_ERR_NOT_FOUND,
                    pkv_seq_abort(e, (b >> 4) % 2 ? 0
                                                  : w->host.last_id + 1 +
                                                        (b >> 5)));
        break;
    case 9:
        EXPECT_FAIL(w, PKV_ERR_INVALID_ARGUMENT,
                    pkv_engine_get_block_table(e, w->host.last_id, NULL, &n1,
                                               &n2));
        (void)blocks;
        break;
    case 10:
        EXPECT_FAIL(w, PKV_ERR_INVALID_ARGUMENT,
                    pkv_seq_fork(e, w->host.last_id, -1, NULL));
        break;
    default:
        EXPECT_FAIL(w, PKV_ERR_INVALID_ARGUMENT,
                    pkv_engine_attend(NULL, 0, &q, &k, &k, &q));
        break;
    }
}

/* Bad calls in the middle of a step, before any layer is attended. */
static void bad_in_step(world *w, uint8_t b)
{
    ch_host *h = &w->host;
    pkv_engine *e = h->engine;
    uint32_t T = h->batch->num_tokens;
    pkv_tensor q = good_tensor(w, 0), k = good_tensor(w, 1);
    pkv_tensor o = q;
    o.data = h->out;
    const pkv_batch *again = h->batch;
    pkv_seq_id child = 5;
    switch (b % 11) {
    case 0:
        EXPECT_FAIL(w, PKV_ERR_BAD_STATE, pkv_engine_step_begin(e, &again));
        CHECK(again == NULL);
        break;
    case 1:
        /* Layers left: too early, unless the batch has no rows (then
         * step_end needs no attend and would end the step). */
        if (T > 0)
            EXPECT_FAIL(w, PKV_ERR_BAD_STATE,
                        pkv_engine_step_end(e, NULL, NULL, 0));
        break;
    case 2:
        EXPECT_FAIL(w, PKV_ERR_INVALID_ARGUMENT,
                    pkv_engine_attend(e, h->params.num_layers, &q, &k, &k, &o));
        break;
    case 3:
        k.rows = T + 1u + (b >> 4) % 3u;
        EXPECT_FAIL(w, PKV_ERR_INVALID_ARGUMENT,
                    pkv_engine_attend(e, 0, &q, &k, &k, &o));
        break;
    case 4:
        o.heads = h->params.num_q_heads + 1;
        EXPECT_FAIL(w, PKV_ERR_INVALID_ARGUMENT,
                    pkv_engine_attend(e, 0, &q, &k, &k, &o));
        break;
    case 5:
        q.head_dim = h->params.head_dim + 4;
        EXPECT_FAIL(w, PKV_ERR_INVALID_ARGUMENT,
                    pkv_engine_attend(e, 0, &q, &k, &k, &o));
        break;
    case 6:
        k.struct_size = (b >> 4) % 2 ? 0 : (uint32_t)sizeof k - 8;
        EXPECT_FAIL(w, PKV_ERR_STRUCT_SIZE,
                    pkv_engine_attend(e, 0, &q, &k, &k, &o));
        break;
    case 7:
        o.dtype = 2 + (b >> 4);
        EXPECT_FAIL(w, PKV_ERR_INVALID_ARGUMENT,
                    pkv_engine_attend(e, 0, &q, &k, &k, &o));
        break;
    case 8:
        EXPECT_FAIL(w, PKV_ERR_INVALID_ARGUMENT,
                    pkv_engine_attend(e, 0, (b >> 4) % 2 ? NULL : &q, &k,
                                      (b >> 4) % 2 ? &k : NULL, &o));
        break;
    case 9:
        if (T > 0) {
            k.data = NULL;
            EXPECT_FAIL(w, PKV_ERR_INVALID_ARGUMENT,
                        pkv_engine_attend(e, 0, &q, &k, &k, &o));
        }
        break;
    default:
        if (h->last_id > 0)
            EXPECT_FAIL(w, PKV_ERR_BAD_STATE,
                        pkv_seq_fork(e, h->last_id, -1, &child));
        CHECK(child == 0 || h->last_id == 0);
        break;
    }
}

/* Bad calls after every layer is attended, before step_end. */
static void bad_after_attend(world *w, uint8_t b)
{
    ch_host *h = &w->host;
    pkv_engine *e = h->engine;
    uint32_t n = h->batch->num_samples;
    int32_t sampled[MAX_PROMPT + 2];
    memset(sampled, 0, sizeof sampled);
    pkv_tensor q = good_tensor(w, 0), k = good_tensor(w, 1);
    pkv_tensor o = q;
    o.data = h->out;
    if (n + 1 > MAX_PROMPT + 1)
        return;
    switch (b % 3) {
    case 0:
        EXPECT_FAIL(w, PKV_ERR_BAD_STATE,
                    pkv_engine_attend(e, (uint32_t)(b >> 2) %
                                             h->params.num_layers,
                                      &q, &k, &k, &o));
        break;
    case 1:
        EXPECT_FAIL(w, PKV_ERR_INVALID_ARGUMENT,
                    pkv_engine_step_end(e, sampled, NULL, n + 1));
        break;
    default:
        if (n > 0) {
            sampled[(b >> 2) % n] =
                (b >> 7) ? -1 : (int32_t)h->params.vocab_size;
            EXPECT_FAIL(w, PKV_ERR_INVALID_ARGUMENT,
                        pkv_engine_step_end(e, sampled, NULL, n));
        }
        break;
    }
}

static void op_step(world *w, int plain)
{
    ch_host *h = &w->host;
    uint8_t v = plain ? 0xff : next_byte(&w->in);
    uint8_t arg = plain ? 0 : next_byte(&w->in);
    ch_begin(h);
    ch_check(h);
    if (v % 8 == 0)
        bad_in_step(w, arg);
    uint32_t poison = UINT32_MAX, layer = 0;
    if ((v >> 3) % 8 == 0 && h->batch->num_tokens > 0) {
        poison = (uint32_t)arg % h->batch->num_tokens;
        layer = (uint32_t)(arg >> 4) % h->params.num_layers;
    }
    ch_attend(h, poison, layer);
    ch_check(h);
    if (v % 8 == 1)
        bad_after_attend(w, arg);
    uint8_t stop[256];
    uint32_t n = h->batch->num_samples;
    int stops = !plain && (v >> 6) == 1 && n <= sizeof stop;
    for (uint32_t j = 0; stops && j < n; j++)
        stop[j] = (uint8_t)(((unsigned)arg >> (j % 8)) & 1u);
    ch_end(h, stops ? stop : NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    world *w = &W;
    if (size < 9)
        return 0;
    w->in.data = data;
    w->in.size = size;
    w->in.pos = 0;
    create(w);
    ch_check(&w->host);
    for (uint32_t ops = 0; ops < MAX_OPS && w->in.pos < w->in.size; ops++) {
        uint8_t op = next_byte(&w->in);
        switch (op % 16) {
        case 0: case 1: case 2: case 3:
            op_add(w);
            break;
        case 4:
            op_abort(w);
            break;
        case 5:
            if (op / 16 % 2)
                op_propose(w);
            else
                op_fork(w);
            break;
        case 6: case 7: case 8: case 9: case 10:
            op_step(w, 0);
            break;
        case 11: case 12:
            op_bad(w);
            break;
        case 13:
            if (op / 16 % 4 == 1)
                op_truncate(w);
            else if (op / 16 % 4 == 3)
                op_move(w);
            else if (op / 16 % 8 == 2)
                op_reload(w);
            else if (op / 16 % 8 == 6)
                op_store_fault(w);
            else if (op / 16 % 8 == 4)
                op_tamper(w);
            else
                op_block_table(w);
            break;
        default:
            op_step(w, 1);
            break;
        }
        ch_check(&w->host);
        pkv_fuzz_ops++;
    }
    ch_drain(&w->host, MAX_DRAIN_STEPS);
    if (TOT.inputs++ == 0 && getenv("PKV_FUZZ_SUMMARY") != NULL)
        atexit(print_totals);
    pkv_engine_stats st;
    st.struct_size = sizeof st;
    CHECK(pkv_engine_get_stats(w->host.engine, &st) == PKV_OK);
    TOT.rows += w->host.rows_checked;
    TOT.steps += w->host.steps;
    TOT.ended += w->host.ended;
    TOT.preemptions += st.preemptions;
    TOT.swap_outs += st.swap_outs;
    TOT.windowed_swaps += w->windowed ? st.swap_outs : 0;
    TOT.hit_tokens += st.prefix_hit_tokens;
    TOT.drafts_run += st.draft_tokens;
    TOT.drafts_accepted += st.draft_tokens_accepted;
    TOT.store_hit_blocks += st.store_hit_blocks;
    TOT.store_saves += st.store_saves;
    TOT.store_rejected += st.store_damaged + st.store_mismatched;
    int dt = w->host.params.kv_dtype;
    if (w->host.max_error > TOT.max_error[dt])
        TOT.max_error[dt] = w->host.max_error;
    free(w->before);
    w->before = NULL;
    ch_free(&w->host);
#ifdef PKV_FUZZ_REDIS
    pkv_redis_destroy(w->redis);
    w->redis = NULL;
#endif
    if (w->has_store) {
        fs_free(&w->store_fake); /* nothing left in flight */
        fs_data_free(&w->store_data);
        w->has_store = 0;
    }
    return 0;
}
