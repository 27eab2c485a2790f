/* SPDX-License-Identifier: MIT */
/* Public API of the engine object: version, statuses, params, create and
 * destroy, stats, allocator and log callbacks, bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "pkv/pkv.h"

#include <stdlib.h>
#include <string.h>

static void test_version(void **state)
{
    (void)state;
    assert_int_equal(pkv_version_number(), PKV_VERSION_NUMBER);
    assert_string_equal(pkv_version_string(), PKV_VERSION_STRING);
}

static void test_status_names_and_messages(void **state)
{
    (void)state;
#define CHECK_STATUS(name, value, message)                  \
    assert_string_equal(pkv_status_name(name), #name);      \
    assert_string_equal(pkv_status_string(name), message);  \
    assert_int_equal((int)name, value);
    PKV_STATUS_LIST(CHECK_STATUS)
#undef CHECK_STATUS
    assert_string_equal(pkv_status_name((pkv_status)-999),
                        "PKV_UNKNOWN_STATUS");
    assert_string_equal(pkv_status_string((pkv_status)5), "unknown status");
}

typedef struct counting {
    size_t live_bytes;
    size_t calls;
} counting;

static void *counting_alloc(void *user, size_t size)
{
    counting *c = user;
    c->live_bytes += size;
    c->calls++;
    return malloc(size);
}

static void counting_free(void *user, void *ptr, size_t size)
{
    counting *c = user;
    c->live_bytes -= size;
    free(ptr);
}

/* Refuses anything of a megabyte or more. */
static void *small_alloc(void *user, size_t size)
{
    return size < (1u << 20) ? counting_alloc(user, size) : NULL;
}

static pkv_engine_params small_params(void)
{
    pkv_engine_params p;
    assert_int_equal(pkv_engine_params_init(&p), PKV_OK);
    p.num_layers = 2;
    p.num_q_heads = 8;
    p.num_kv_heads = 2;
    p.head_dim = 64;
    p.block_size = 16;
    p.num_blocks = 64;
    return p;
}

/* Create must fail with `expected`, leave *out NULL and say why. */
static void expect_create_fails(const pkv_engine_params *p,
                                pkv_status expected, const char *needle)
{
    pkv_engine *e = (pkv_engine *)(uintptr_t)1;
    assert_int_equal(pkv_engine_create(p, &e), expected);
    assert_null(e);
    const char *msg = pkv_last_error();
    assert_non_null(strstr(msg, pkv_status_name(expected)));
    if (strstr(msg, needle) == NULL)
        fail_msg("message \"%s\" does not name \"%s\"", msg, needle);
}

static void test_params_init_defaults(void **state)
{
    (void)state;
    assert_int_equal(pkv_engine_params_init(NULL), PKV_ERR_INVALID_ARGUMENT);
    pkv_engine_params p;
    memset(&p, 0xff, sizeof p);
    assert_int_equal(pkv_engine_params_init(&p), PKV_OK);
    assert_int_equal(p.struct_size, sizeof p);
    assert_int_equal(p.block_size, 0); /* follow the device */
    assert_int_equal(p.kv_dtype, PKV_KV_DTYPE_F16);
    assert_null(p.allocator.alloc);
    assert_null(p.log);
}

/* A pkv_parallel_fn that runs the tasks in order on worker 0. */
static void fake_parallel(void *user, pkv_task_fn task, void *arg,
                          uint32_t count)
{
    (void)user;
    for (uint32_t i = 0; i < count; i++)
        task(arg, i, 0);
}

static void test_create_rejects_bad_params(void **state)
{
    (void)state;
    pkv_engine_params p = small_params();
    pkv_engine *e = (pkv_engine *)&p; /* must come back NULL */
    assert_int_equal(pkv_engine_create(NULL, &e), PKV_ERR_INVALID_ARGUMENT);
    assert_null(e);
    assert_int_equal(pkv_engine_create(&p, NULL), PKV_ERR_INVALID_ARGUMENT);

    p.struct_size = 12;
    expect_create_fails(&p, PKV_ERR_STRUCT_SIZE, "struct_size");
    p = small_params();
    p.struct_size = sizeof p + 8;
    expect_create_fails(&p, PKV_ERR_STRUCT_SIZE, "struct_size");
    p = small_params();
    p.flags = 1;
    expect_create_fails(&p, PKV_ERR_INVALID_ARGUMENT, "flags");
    p = small_params();
    p.num_layers = 0;
    expect_create_fails(&p, PKV_ERR_INVALID_ARGUMENT, "num_layers");
    p = small_params();
    p.num_kv_heads = 0;
    expect_create_fails(&p, PKV_ERR_INVALID_ARGUMENT, "num_kv_heads");
    p = small_params();
    p.num_kv_heads = 3;
    expect_create_fails(&p, PKV_ERR_UNSUPPORTED, "multiple");
    p = small_params();
    p.head_dim = 66;
    expect_create_fails(&p, PKV_ERR_UNSUPPORTED, "head_dim");
    p = small_params();
    p.block_size = 12;
    expect_create_fails(&p, PKV_ERR_INVALID_ARGUMENT, "block_size");
    p = small_params();
    p.kv_dtype = 7;
    expect_create_fails(&p, PKV_ERR_INVALID_ARGUMENT, "kv_dtype");
    p = small_params();
    p.value_quant = -1;
    expect_create_fails(&p, PKV_ERR_INVALID_ARGUMENT, "value_quant");
    /* U4 groups: a multiple of 8 dividing head_dim (64), or head_dim;
     * ignored by the other dtypes. */
    p = small_params();
    p.kv_dtype = PKV_KV_DTYPE_U4;
    p.u4_group = 12;
    expect_create_fails(&p, PKV_ERR_INVALID_ARGUMENT, "u4_group");
    p.kv_dtype = PKV_KV_DTYPE_U8K_U4V;
    p.u4_group = 48;
    expect_create_fails(&p, PKV_ERR_INVALID_ARGUMENT, "u4_group");
    p.kv_dtype = PKV_KV_DTYPE_U8;
    pkv_engine *e8;
    assert_int_equal(pkv_engine_create(&p, &e8), PKV_OK);
    pkv_engine_destroy(e8);
    /* The host's threads: 1 to 256 workers when lent, ignored when not. */
    p = small_params();
    p.parallel = fake_parallel;
    expect_create_fails(&p, PKV_ERR_INVALID_ARGUMENT, "parallel_workers");
    p.parallel_workers = 257;
    expect_create_fails(&p, PKV_ERR_INVALID_ARGUMENT, "parallel_workers");
    p.parallel = NULL;
    pkv_engine *serial;
    assert_int_equal(pkv_engine_create(&p, &serial), PKV_OK);
    pkv_engine_destroy(serial);
    p = small_params();
    p.num_blocks = 1;
    expect_create_fails(&p, PKV_ERR_INVALID_ARGUMENT, "num_blocks");
    p = small_params();
    p.num_blocks = UINT32_MAX; /* 0xffffffff is no block */
    expect_create_fails(&p, PKV_ERR_INVALID_ARGUMENT, "at most 4294967294");
    p = small_params();
    p.num_blocks = 0;
    p.cache_bytes = 1000;
    expect_create_fails(&p, PKV_ERR_INVALID_ARGUMENT, "cache_bytes");
    /* A derived count is checked as an explicit one, naming cache_bytes,
     * before any metadata is allocated. */
    p = small_params();
    p.num_blocks = 0;
    p.cache_bytes = 1ull << 63;
    expect_create_fails(&p, PKV_ERR_INVALID_ARGUMENT,
                        "cache_bytes 9223372036854775808 holds");
    p = small_params();
    p.allocator.alloc = counting_alloc; /* free left NULL */
    expect_create_fails(&p, PKV_ERR_INVALID_ARGUMENT, "allocator");
}

static void test_destroy_null_is_noop(void **state)
{
    (void)state;
    pkv_engine_destroy(NULL);
    assert_string_equal(pkv_engine_last_error(NULL), pkv_last_error());
}

static void test_blocks_from_cache_bytes(void **state)
{
    (void)state;
    pkv_engine_params p = small_params();
    p.num_blocks = 0;
    /* f16, 2 layers x 2 kv heads x (K + V) x 16 tokens x 64 channels x 2 B */
    uint64_t block_bytes = 2ull * 2 * 2 * 16 * 64 * 2;
    p.cache_bytes = block_bytes * 100 + block_bytes / 2;
    pkv_engine *e = NULL;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
    pkv_engine_stats s;
    s.struct_size = sizeof s;
    assert_int_equal(pkv_engine_get_stats(e, &s), PKV_OK);
    assert_int_equal(s.block_bytes, block_bytes);
    assert_int_equal(s.blocks_total, 100);
    assert_int_equal(s.blocks_free, 99);
    assert_int_equal(s.blocks_used, 1);
    assert_int_equal(s.blocks_cached_free, 0);
    assert_int_equal(s.tokens_stored, 0);
    assert_int_equal(s.slots_allocated, 0);
    assert_string_equal(pkv_engine_last_error(e), "");
    pkv_engine_destroy(e);

    /* u8 with default groups: codes plus f16 lo/scale per channel (keys)
     * and per token (values). */
    p.kv_dtype = PKV_KV_DTYPE_U8;
    p.num_blocks = 10;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
    assert_int_equal(pkv_engine_get_stats(e, &s), PKV_OK);
    uint64_t k = 16 * 64 + 4 * 64, v = 16 * 64 + 4 * 16;
    assert_int_equal(s.block_bytes, 2 * 2 * (k + v));
    pkv_engine_destroy(e);
}

/* block_size 0 follows the device: 64 on the CPU backend and on CPU
 * OpenCL devices (PoCL), 16 on GPUs. */
static void test_block_size_follows_the_device(void **state)
{
    (void)state;
    pkv_engine_params p = small_params();
    p.block_size = 0;
    p.backend = PKV_BACKEND_KIND_CPU;
    pkv_engine *e = NULL;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
    pkv_engine_stats s;
    s.struct_size = sizeof s;
    assert_int_equal(pkv_engine_get_stats(e, &s), PKV_OK);
    assert_int_equal(s.block_size, 64);
    pkv_engine_destroy(e);
    p.backend = PKV_BACKEND_KIND_AUTO;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
    assert_int_equal(pkv_engine_get_stats(e, &s), PKV_OK);
    assert_true(s.block_size == 16 || s.block_size == 64);
    pkv_engine_destroy(e);
}

static void test_stats_bad_input(void **state)
{
    (void)state;
    pkv_engine_params p = small_params();
    pkv_engine *e = NULL;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
    pkv_engine_stats s;
    memset(&s, 0, sizeof s);
    assert_int_equal(pkv_engine_get_stats(e, &s), PKV_ERR_STRUCT_SIZE);
    assert_int_equal(pkv_engine_get_stats(e, NULL), PKV_ERR_INVALID_ARGUMENT);
    s.struct_size = sizeof s;
    assert_int_equal(pkv_engine_get_stats(NULL, &s),
                     PKV_ERR_INVALID_ARGUMENT);
    pkv_engine_destroy(e);
}

static void test_allocator_is_used_and_balanced(void **state)
{
    (void)state;
    counting c = {0, 0};
    pkv_engine_params p = small_params();
    p.allocator.alloc = counting_alloc;
    p.allocator.free = counting_free;
    p.allocator.user = &c;
    pkv_engine *e = NULL;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
    assert_true(c.calls > 0);
    assert_true(c.live_bytes > 0);
    pkv_engine_destroy(e);
    assert_int_equal(c.live_bytes, 0);
}

typedef struct log_capture {
    int lines;
    int32_t level;
    char first[256], last[256];
} log_capture;

static void capture_log(void *user, int32_t level, const char *message)
{
    log_capture *l = user;
    if (l->lines++ == 0)
        strncpy(l->first, message, sizeof l->first - 1);
    l->level = level;
    strncpy(l->last, message, sizeof l->last - 1);
}

static void test_log_callback(void **state)
{
    (void)state;
    log_capture l;
    memset(&l, 0, sizeof l);
    pkv_engine_params p = small_params();
    p.log = capture_log;
    p.log_user = &l;
    pkv_engine *e = NULL;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
    /* The creation line, after (OpenCL builds) the ICD files the loader
     * is about to read and the decode kernel the backend built. */
    if (l.lines > 1)
        assert_non_null(strstr(l.first, "opencl: the ICD loader reads"));
    assert_true(l.lines >= 1 && l.lines <= 3);
    assert_int_equal(l.level, PKV_LOG_LEVEL_INFO);
    assert_non_null(strstr(l.last, "64 blocks of 16 tokens"));
    /* The creation line names the backend that pkv_engine_backend_name
     * reports. */
    assert_non_null(strstr(l.last, pkv_engine_backend_name(e)));
    assert_true(strncmp(pkv_engine_backend_name(e), "cpu", 3) == 0 ||
                strncmp(pkv_engine_backend_name(e), "opencl (", 8) == 0);
    assert_string_equal(pkv_engine_backend_name(NULL), "");
    pkv_engine_destroy(e);

    /* Below the threshold: silent. */
    memset(&l, 0, sizeof l);
    p.log_level = PKV_LOG_LEVEL_WARN;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
    assert_int_equal(l.lines, 0);
    pkv_engine_destroy(e);
}

/* pkv_seq_params exactly as pkv 0.1.0 laid it out, before user_data was
 * appended: what a program built against that header passes. */
typedef struct seq_params_0_1_0 {
    uint32_t struct_size;
    uint32_t flags;
    const int32_t *prompt;
    uint32_t prompt_len;
    uint32_t max_new_tokens;
    int32_t priority;
    uint32_t tenant;
    uint64_t cache_salt;
} seq_params_0_1_0;

/* Attend every layer with zero tensors, then end the step sampling token 1
 * for every sample row. */
static void run_step(pkv_engine *e, const pkv_batch *b)
{
    const pkv_engine_params p = small_params();
    size_t rows = b->num_tokens;
    float *zeros = calloc(rows * p.num_q_heads * p.head_dim + 1, 4);
    float *out = calloc(rows * p.num_q_heads * p.head_dim + 1, 4);
    assert_non_null(zeros);
    assert_non_null(out);
    pkv_tensor q = {sizeof q,
                    PKV_TENSOR_DTYPE_F32,
                    PKV_TENSOR_MEMORY_HOST,
                    (uint32_t)rows,
                    p.num_q_heads,
                    p.head_dim,
                    zeros,
                    0};
    pkv_tensor kv = q, o = q;
    kv.heads = p.num_kv_heads;
    o.data = out;
    for (uint32_t l = 0; l < p.num_layers; l++)
        assert_int_equal(pkv_engine_attend(e, l, &q, &kv, &kv, &o), PKV_OK);
    int32_t sampled[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    assert_true(b->num_samples <= 8);
    assert_int_equal(
        pkv_engine_step_end(e, b->num_samples ? sampled : NULL, NULL,
                            b->num_samples),
        PKV_OK);
    free(zeros);
    free(out);
}

/* user_data comes back with the sequence in every batch, a fork inherits
 * it, and a caller built against 0.1.0 (no user_data) still adds
 * sequences, which then carry NULL. */
static void test_user_data_and_older_seq_params(void **state)
{
    (void)state;
    pkv_engine_params p = small_params();
    p.backend = PKV_BACKEND_KIND_CPU;
    pkv_engine *e = NULL;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
    int32_t prompt[5] = {1, 2, 3, 4, 5};
    int host_a = 0, host_b = 0;
    pkv_seq_params sp;
    pkv_seq_params_init(&sp);
    sp.prompt = prompt;
    sp.prompt_len = 5;
    sp.max_new_tokens = 3;
    sp.user_data = &host_a;
    pkv_seq_id a, b, old, child;
    assert_int_equal(pkv_seq_add(e, &sp, &a), PKV_OK);
    sp.user_data = &host_b;
    assert_int_equal(pkv_seq_add(e, &sp, &b), PKV_OK);
    seq_params_0_1_0 v0;
    memset(&v0, 0, sizeof v0);
    v0.struct_size = sizeof v0;
    v0.prompt = prompt;
    v0.prompt_len = 5;
    v0.max_new_tokens = 3;
    assert_true(sizeof v0 < sizeof(pkv_seq_params));
    assert_int_equal(pkv_seq_add(e, (const pkv_seq_params *)(void *)&v0,
                                 &old),
                     PKV_OK);

    const pkv_batch *batch;
    assert_int_equal(pkv_engine_step_begin(e, &batch), PKV_OK);
    assert_int_equal(batch->num_seqs, 3);
    for (uint32_t i = 0; i < batch->num_seqs; i++) {
        pkv_seq_id id = batch->seq_ids[i];
        void *want = id == a ? (void *)&host_a
                     : id == b ? (void *)&host_b
                               : NULL;
        assert_ptr_equal(batch->seq_user_data[i], want);
    }
    run_step(e, batch);
    assert_int_equal(pkv_seq_fork(e, b, -1, &child), PKV_OK);
    int children = 0, ends = 0;
    for (int step = 0; step < 10 && pkv_engine_has_work(e); step++) {
        assert_int_equal(pkv_engine_step_begin(e, &batch), PKV_OK);
        for (uint32_t i = 0; i < batch->num_seqs; i++)
            if (batch->seq_ids[i] == child) {
                assert_ptr_equal(batch->seq_user_data[i], &host_b);
                children++;
            }
        for (uint32_t i = 0; i < batch->num_finished; i++) {
            pkv_seq_id id = batch->finished[i].id;
            void *want = id == a ? (void *)&host_a
                         : id == b || id == child ? (void *)&host_b
                                                  : NULL;
            assert_ptr_equal(batch->finished_user_data[i], want);
            ends++;
        }
        run_step(e, batch);
    }
    assert_true(children > 0);
    assert_int_equal(ends, 4);
    pkv_engine_destroy(e);
}

/* A CPU-backend engine of small_params with one sequence of the prompt
 * added and its first step begun; *id and *batch receive them. */
static pkv_engine *engine_with_step(const int32_t *prompt, uint32_t len,
                                    pkv_seq_id *id, const pkv_batch **batch)
{
    pkv_engine_params p = small_params();
    p.backend = PKV_BACKEND_KIND_CPU;
    pkv_engine *e = NULL;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
    pkv_seq_params sp;
    pkv_seq_params_init(&sp);
    sp.prompt = prompt;
    sp.prompt_len = len;
    assert_int_equal(pkv_seq_add(e, &sp, id), PKV_OK);
    assert_int_equal(pkv_engine_step_begin(e, batch), PKV_OK);
    return e;
}

/* Deterministic values in [-1, 1). */
static void fill(float *x, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / 8388608.0f - 1.0f;
    }
}

/* out aliasing q (in place) gives what a separate out gives: layer 0 runs
 * with a separate out, layer 1 in place on the same q, k and v (both
 * layers' caches hold only this step's rows, so the outputs must match).
 * A host tensor whose data + offset is misaligned is refused. */
static void test_attend_in_place_and_alignment(void **state)
{
    (void)state;
    const pkv_engine_params p = small_params();
    int32_t prompt[7] = {1, 2, 3, 4, 5, 6, 7};
    pkv_seq_id id;
    const pkv_batch *b;
    pkv_engine *e = engine_with_step(prompt, 7, &id, &b);
    uint32_t rows = b->num_tokens, hq = p.num_q_heads, hkv = p.num_kv_heads;
    size_t nq = (size_t)rows * hq * p.head_dim;
    size_t nkv = (size_t)rows * hkv * p.head_dim;
    float *q = malloc(nq * 4 + 8), *q2 = malloc(nq * 4), *out = malloc(nq * 4);
    float *k = malloc(nkv * 4), *v = malloc(nkv * 4);
    assert_true(q && q2 && out && k && v);
    fill(q, nq, 1);
    fill(k, nkv, 2);
    fill(v, nkv, 3);
    memcpy(q2, q, nq * 4);
    pkv_tensor tq =
        pkv_tensor_host(q, 0, PKV_TENSOR_DTYPE_F32, rows, hq, p.head_dim);
    /* Inputs the host holds as const (before pkv_tensor_host took const
     * data: a discarded-qualifiers warning, an error with PKV_WERROR). */
    const float *k_in = k, *v_in = v;
    pkv_tensor tk =
        pkv_tensor_host(k_in, 0, PKV_TENSOR_DTYPE_F32, rows, hkv, p.head_dim);
    pkv_tensor tv =
        pkv_tensor_host(v_in, 0, PKV_TENSOR_DTYPE_F32, rows, hkv, p.head_dim);
    pkv_tensor to =
        pkv_tensor_host(out, 0, PKV_TENSOR_DTYPE_F32, rows, hq, p.head_dim);
    pkv_tensor bad = tq;
    bad.offset = 2;
    assert_int_equal(pkv_engine_attend(e, 0, &bad, &tk, &tv, &to),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(pkv_engine_last_error(e), "not aligned"));
    assert_int_equal(pkv_engine_attend(e, 0, &tq, &tk, &tv, &to), PKV_OK);
    pkv_tensor in_place =
        pkv_tensor_host(q2, 0, PKV_TENSOR_DTYPE_F32, rows, hq, p.head_dim);
    assert_int_equal(pkv_engine_attend(e, 1, &in_place, &tk, &tv, &in_place),
                     PKV_OK);
    for (size_t i = 0; i < nq; i++)
        assert_true(q2[i] == out[i]);
    pkv_engine_destroy(e);
    free(q);
    free(q2);
    free(out);
    free(k);
    free(v);
}

/* Each failure sets the engine's message and this thread's, fresh. */
static void test_failures_set_messages(void **state)
{
    (void)state;
    pkv_engine_params p = small_params();
    p.backend = PKV_BACKEND_KIND_CPU;
    pkv_engine *e = NULL;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
    assert_int_equal(pkv_engine_step_begin(e, NULL),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(pkv_engine_last_error(e), "out is NULL"));
    assert_string_equal(pkv_last_error(), pkv_engine_last_error(e));
    assert_int_equal(pkv_engine_get_stats(e, NULL), PKV_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(pkv_engine_last_error(e), "stats is NULL"));
    pkv_engine_stats st;
    memset(&st, 0, sizeof st);
    assert_int_equal(pkv_engine_get_stats(e, &st), PKV_ERR_STRUCT_SIZE);
    assert_non_null(strstr(pkv_engine_last_error(e), "struct_size is 0"));
    assert_int_equal(pkv_engine_stats_init(&st), PKV_OK);
    assert_int_equal(pkv_engine_get_stats(e, &st), PKV_OK);
    assert_int_equal(st.blocks_total, p.num_blocks);
    const uint32_t *blocks;
    uint32_t nb, nt;
    assert_int_equal(pkv_engine_get_block_table(e, 1, NULL, &nb, &nt),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(pkv_engine_last_error(e), "out-parameter"));
    assert_int_equal(pkv_engine_get_block_table(e, 1, &blocks, &nb, &nt),
                     PKV_ERR_NOT_FOUND);
    assert_non_null(strstr(pkv_engine_last_error(e), "is not live"));
    assert_int_equal(pkv_seq_fork(e, 1, -1, NULL), PKV_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(pkv_engine_last_error(e), "out_child is NULL"));
    /* abort and add may run on any thread: both messages too. */
    assert_int_equal(pkv_seq_abort(e, 99), PKV_ERR_NOT_FOUND);
    assert_non_null(strstr(pkv_last_error(), "99 was never added"));
    assert_string_equal(pkv_last_error(), pkv_engine_last_error(e));
    pkv_seq_params sp;
    pkv_seq_params_init(&sp);
    pkv_seq_id id;
    assert_int_equal(pkv_seq_add(e, &sp, &id), PKV_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(pkv_engine_last_error(e), "prompt is NULL"));
    assert_string_equal(pkv_last_error(), pkv_engine_last_error(e));
    pkv_engine_destroy(e);

    /* create: an inner failure without a message of its own never shows
     * an earlier failure's. */
    p.num_blocks = 0;
    p.cache_bytes = 100;
    assert_int_not_equal(pkv_engine_create(&p, &e), PKV_OK);
    assert_non_null(strstr(pkv_last_error(), "cache_bytes"));
    p = small_params();
    p.num_blocks = 1u << 20; /* the pool's metadata: megabytes */
    counting c = {0, 0};
    p.allocator.alloc = small_alloc;
    p.allocator.free = counting_free;
    p.allocator.user = &c;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_ERR_OUT_OF_MEMORY);
    assert_null(strstr(pkv_last_error(), "cache_bytes"));
    assert_non_null(strstr(pkv_last_error(), "of 1048576 blocks"));
}

/* A fork of a sequence whose abort is queued is refused. */
static void test_fork_of_aborting_sequence(void **state)
{
    (void)state;
    int32_t prompt[5] = {1, 2, 3, 4, 5};
    pkv_seq_id id, child;
    const pkv_batch *b;
    pkv_engine *e = engine_with_step(prompt, 5, &id, &b);
    run_step(e, b);
    assert_int_equal(pkv_seq_abort(e, id), PKV_OK);
    assert_int_equal(pkv_seq_fork(e, id, -1, &child), PKV_ERR_BAD_STATE);
    assert_non_null(strstr(pkv_engine_last_error(e), "abort pending"));
    assert_int_equal(pkv_engine_step_begin(e, &b), PKV_OK);
    assert_int_equal(b->num_finished, 1);
    assert_int_equal(b->finished[0].reason, PKV_FINISH_REASON_ABORTED);
    /* Nothing left to run: a batch with no rows ends without attends. */
    assert_int_equal(b->num_tokens, 0);
    assert_int_equal(pkv_engine_step_end(e, NULL, NULL, 0), PKV_OK);
    assert_int_equal(pkv_engine_has_work(e), 0);
    pkv_engine_destroy(e);
}

/* A sequence added but not yet seen by any step: has_work counts it, its
 * block table is empty, a fork of it is a bad state (not "not found"). */
static void test_queued_sequence(void **state)
{
    (void)state;
    pkv_engine_params p = small_params();
    p.backend = PKV_BACKEND_KIND_CPU;
    pkv_engine *e = NULL;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
    int32_t prompt[3] = {1, 2, 3};
    pkv_seq_params sp;
    pkv_seq_params_init(&sp);
    sp.prompt = prompt;
    sp.prompt_len = 3;
    pkv_seq_id id, child;
    assert_int_equal(pkv_seq_add(e, &sp, &id), PKV_OK);
    assert_int_equal(pkv_engine_has_work(e), 1);
    const uint32_t *blocks = (const uint32_t *)&id;
    uint32_t nb = 9, nt = 9;
    assert_int_equal(pkv_engine_get_block_table(e, id, &blocks, &nb, &nt),
                     PKV_OK);
    assert_null(blocks);
    assert_int_equal(nb, 0);
    assert_int_equal(nt, 0);
    assert_int_equal(pkv_seq_fork(e, id, -1, &child), PKV_ERR_BAD_STATE);
    assert_int_equal(pkv_engine_get_block_table(e, id + 1, &blocks, &nb, &nt),
                     PKV_ERR_NOT_FOUND);
    pkv_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_status_names_and_messages),
        cmocka_unit_test(test_params_init_defaults),
        cmocka_unit_test(test_create_rejects_bad_params),
        cmocka_unit_test(test_destroy_null_is_noop),
        cmocka_unit_test(test_blocks_from_cache_bytes),
        cmocka_unit_test(test_block_size_follows_the_device),
        cmocka_unit_test(test_stats_bad_input),
        cmocka_unit_test(test_allocator_is_used_and_balanced),
        cmocka_unit_test(test_log_callback),
        cmocka_unit_test(test_user_data_and_older_seq_params),
        cmocka_unit_test(test_attend_in_place_and_alignment),
        cmocka_unit_test(test_failures_set_messages),
        cmocka_unit_test(test_fork_of_aborting_sequence),
        cmocka_unit_test(test_queued_sequence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
