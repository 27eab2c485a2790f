/* SPDX-License-Identifier: MIT */
/*
 * Fault sweep: a backend that fails its Nth call, for every N of a
 * workload with prefix hits, a fork, preemption (swap and recompute),
 * draft tokens and a U8 cache (with prompt chunks that start inside staged
 * blocks); on OpenCL, the same workload with its Nth enqueue, buffer
 * creation or wait failing inside the OpenCL backend; and the same
 * workload with the engine's allocator failing its Nth allocation once the
 * prompts are in (a step_begin that fails must change nothing). The host
 * calls again after each failure (ch_host.retry); every
 * sequence must still end by length with the tokens a fault-free run
 * gives, every output row must match the dense reference (so no sequence
 * ever attends over KV that was not written, from a prefix hit or
 * otherwise), the invariant check must hold after every step, and the
 * pool must end idle.
 */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "check.h"
#include "engine.h"
#include "kv_layout.h"
#include "seqs.h"
#include "check_host_cmocka.h"
#include "hash_model.h"

#include <stdlib.h>
#include <string.h>

#ifdef PKV_HAVE_OPENCL
#include <CL/cl.h>
#include <dlfcn.h>
#endif

/* ------------------------------------------------ the failing backend */

static const pkv__backend_ops *real;
static pkv__backend_ops faulty;
static long calls, fail_at;

static pkv_status fault(void)
{
    return ++calls == fail_at
               ? pkv__fail(PKV_ERR_DEVICE, "injected fault (call %ld)", calls)
               : PKV_OK;
}

static pkv_status f_begin_step(pkv__backend *b, const pkv__step *s)
{
    pkv_status st = fault();
    return st != PKV_OK ? st : real->begin_step(b, s);
}

static pkv_status f_append(pkv__backend *b, uint32_t layer, const float *k,
                           const float *v)
{
    pkv_status st = fault();
    return st != PKV_OK ? st : real->append(b, layer, k, v);
}

static pkv_status f_attend(pkv__backend *b, uint32_t layer, const float *q,
                           float *out, float scale, uint32_t window)
{
    pkv_status st = fault();
    return st != PKV_OK ? st : real->attend(b, layer, q, out, scale, window);
}

static pkv_status f_append_attend(pkv__backend *b, uint32_t layer,
                                  const float *k, const float *v,
                                  const float *q, float *out, float scale,
                                  uint32_t window)
{
    pkv_status st = fault();
    return st != PKV_OK
               ? st
               : real->append_attend(b, layer, k, v, q, out, scale, window);
}

static pkv_status f_copy_blocks(pkv__backend *b, const pkv__block_copy *p,
                                uint32_t n)
{
    pkv_status st = fault();
    return st != PKV_OK ? st : real->copy_blocks(b, p, n);
}

static pkv_status f_copy_stages(pkv__backend *b, const pkv__block_copy *p,
                                uint32_t n)
{
    pkv_status st = fault();
    return st != PKV_OK ? st : real->copy_stages(b, p, n);
}

static pkv_status f_swap_out(pkv__backend *b, const uint32_t *blocks,
                             uint32_t n, void *host)
{
    pkv_status st = fault();
    return st != PKV_OK ? st : real->swap_out(b, blocks, n, host);
}

static pkv_status f_swap_in(pkv__backend *b, const void *host,
                            const uint32_t *blocks, uint32_t n)
{
    pkv_status st = fault();
    return st != PKV_OK ? st : real->swap_in(b, host, blocks, n);
}

static pkv_status f_stage_out(pkv__backend *b, uint32_t stage, void *host)
{
    pkv_status st = fault();
    return st != PKV_OK ? st : real->stage_out(b, stage, host);
}

static pkv_status f_stage_in(pkv__backend *b, const void *host,
                             uint32_t stage)
{
    pkv_status st = fault();
    return st != PKV_OK ? st : real->stage_in(b, host, stage);
}

static void make_faulty(pkv_engine *e)
{
    real = e->device.ops;
    faulty = *real;
    faulty.begin_step = f_begin_step;
    faulty.append = f_append;
    faulty.attend = f_attend;
    if (real->append_attend != NULL)
        faulty.append_attend = f_append_attend;
    faulty.copy_blocks = f_copy_blocks;
    faulty.copy_stages = f_copy_stages;
    faulty.swap_out = f_swap_out;
    faulty.swap_in = f_swap_in;
    faulty.stage_out = f_stage_out;
    faulty.stage_in = f_stage_in;
    e->device.ops = &faulty;
}

/* ------------------------------------------- failing OpenCL calls */

/* The workload fails its Nth backend call, OpenCL call or allocation. */
enum { AT_BACKEND = 0, AT_OPENCL = 1, AT_ALLOC = 2 };

/* ------------------------------------------- failing allocations */

static int alloc_armed;

static void *fault_alloc(void *user, size_t size)
{
    (void)user;
    if (alloc_armed && ++calls == fail_at)
        return NULL;
    return malloc(size);
}

static void fault_free(void *user, void *ptr, size_t size)
{
    (void)user;
    (void)size;
    free(ptr);
}

#ifdef PKV_HAVE_OPENCL
/* These definitions stand in for the ICD loader's in this program (pkv is
 * linked in statically), so every call the OpenCL backend makes to one of
 * them comes here first: counted while armed, the Nth failed as a device
 * would (out of resources), the others passed on to the real function.
 * The calls a device can fail at run time: enqueues, buffer creation and
 * waits (not clSetKernelArg, whose errors are programming errors). */
static int cl_armed;

static int cl_fault(void)
{
    return cl_armed && ++calls == fail_at;
}

/* The real function, into a function pointer (POSIX lets dlsym's object
 * pointer be one; ISO C has no conversion for it, so copy the bytes). */
static void load_real(const char *name, void *fn, size_t size)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (f == NULL || size != sizeof f)
        fail_msg("dlsym(%s): %s", name, dlerror());
    memcpy(fn, &f, size);
}

/* Declare `real_cl`, pointing at the real function of this name. */
#define REAL(fn)                                                              \
    __typeof__(&fn) real_cl;                                                  \
    load_real(#fn, &real_cl, sizeof real_cl)

cl_int clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dims,
                              const size_t *offset, const size_t *global,
                              const size_t *local, cl_uint nwait,
                              const cl_event *wait, cl_event *ev)
{
    if (cl_fault())
        return CL_OUT_OF_RESOURCES;
    REAL(clEnqueueNDRangeKernel);
    return real_cl(q, k, dims, offset, global, local,
                                        nwait, wait, ev);
}

cl_int clEnqueueWriteBuffer(cl_command_queue q, cl_mem m, cl_bool blocking,
                            size_t off, size_t size, const void *p,
                            cl_uint nwait, const cl_event *wait, cl_event *ev)
{
    if (cl_fault())
        return CL_OUT_OF_RESOURCES;
    REAL(clEnqueueWriteBuffer);
    return real_cl(q, m, blocking, off, size, p, nwait,
                                      wait, ev);
}

cl_int clEnqueueReadBuffer(cl_command_queue q, cl_mem m, cl_bool blocking,
                           size_t off, size_t size, void *p, cl_uint nwait,
                           const cl_event *wait, cl_event *ev)
{
    if (cl_fault())
        return CL_OUT_OF_RESOURCES;
    REAL(clEnqueueReadBuffer);
    return real_cl(q, m, blocking, off, size, p, nwait,
                                     wait, ev);
}

void *clEnqueueMapBuffer(cl_command_queue q, cl_mem m, cl_bool blocking,
                         cl_map_flags flags, size_t off, size_t size,
                         cl_uint nwait, const cl_event *wait, cl_event *ev,
                         cl_int *err)
{
    if (cl_fault()) {
        *err = CL_OUT_OF_RESOURCES;
        return NULL;
    }
    REAL(clEnqueueMapBuffer);
    return real_cl(q, m, blocking, flags, off, size, nwait,
                                    wait, ev, err);
}

cl_mem clCreateBuffer(cl_context c, cl_mem_flags flags, size_t size,
                      void *host, cl_int *err)
{
    if (cl_fault()) {
        if (err != NULL)
            *err = CL_MEM_OBJECT_ALLOCATION_FAILURE;
        return NULL;
    }
    REAL(clCreateBuffer);
    return real_cl(c, flags, size, host, err);
}

cl_int clFinish(cl_command_queue q)
{
    /* The work before it still runs: a real failed wait does not undo it. */
    REAL(clFinish);
    cl_int err = real_cl(q);
    return cl_fault() ? CL_OUT_OF_RESOURCES : err;
}

cl_int clWaitForEvents(cl_uint n, const cl_event *events)
{
    REAL(clWaitForEvents);
    cl_int err = real_cl(n, events);
    return cl_fault() ? CL_OUT_OF_RESOURCES : err;
}
#endif

/* ------------------------------------------------------- the workload */

enum { NSEQ = 5, PROMPT = 11, NEW = 10, SHARED = 8 };

typedef struct outcome {
    int32_t tokens[NSEQ + 1][PROMPT + NEW];
    uint32_t num_tokens[NSEQ + 1];
    uint32_t faults;
} outcome;

/* Drafts (3 at most, the middle one wrong) for every decoding sequence,
 * so that the failures meet steps with drafts too. */
static void propose_all(ch_host *h)
{
    uint32_t vocab = h->params.vocab_size;
    for (pkv_seq_id id = 1; id <= h->last_id; id++) {
        const pkv__seq *s = pkv__seqs_find(&h->engine->seqs, id);
        if (s == NULL || s->state != PKV__SEQ_RUNNING ||
            s->num_computed + 1 != s->num_tokens)
            continue;
        uint32_t room = s->max_new_tokens - s->num_generated - 1;
        uint32_t n = room < 3 ? room : 3;
        int32_t drafts[3], last = s->tokens[s->num_tokens - 1];
        for (uint32_t k = 0; k < n; k++) {
            int32_t truth = hm_sample(last, s->num_tokens - 1 + k, vocab);
            drafts[k] = k == 1 ? (int32_t)((uint32_t)(truth + 1) % vocab)
                               : truth;
            last = drafts[k];
        }
        /* An injected fault counts in h->faults: no drafts this step. */
        pkv_status st = ch_propose(h, id, drafts, n);
        assert_true(st == PKV_OK || h->retry);
    }
}

/* Run the workload with the Nth backend call, OpenCL call or allocation
 * failing (at; fail 0: none); record every sequence's tokens, in order of
 * id. Returns the calls counted. */
static long run(int at, int32_t backend, int32_t mode, int32_t dtype,
                long fail, outcome *o)
{
    pkv_engine_params p = hm_params(backend);
    p.num_blocks = 17; /* 16 usable blocks of 4 tokens: preemption */
    p.watermark = 0;
    p.preempt_mode = mode;
    p.kv_dtype = dtype;
    p.swap_bytes = 1 << 20;
    /* U8: prompt chunks of 3 rows start inside staged blocks (a repeated
     * attend must not freeze from overwritten staged rows). */
    p.long_prefill_threshold = PKV_LAYOUT_QUANTIZED(dtype) ? 3 : 0;
    if (at == AT_ALLOC) {
        p.allocator.alloc = fault_alloc;
        p.allocator.free = fault_free;
    }
    ch_host h;
    ch_cmocka_init(&h, &p, hm_tolerance(dtype));
    h.retry = 1;
    if (at == AT_BACKEND)
        make_faulty(h.engine);
#ifdef PKV_HAVE_OPENCL
    cl_armed = at == AT_OPENCL;
#endif
    calls = 0;
    fail_at = fail;
    /* Prompts share SHARED tokens (two blocks): later ones hit the
     * prefix cache once the first has run. */
    int32_t *shared = hm_prompt(SHARED, 1);
    pkv_seq_id ids[NSEQ + 1];
    for (uint32_t i = 0; i < NSEQ; i++) {
        int32_t *prompt = hm_prompt(PROMPT, 40 + i);
        memcpy(prompt, shared, SHARED * sizeof *prompt);
        ids[i] = ch_add_prompt(&h, prompt, PROMPT, NEW, 0, 0);
        free(prompt);
    }
    free(shared);
    alloc_armed = at == AT_ALLOC;
    int forked = 0;
    for (uint32_t step = 0; step < 400 && pkv_engine_has_work(h.engine);
         step++) {
        propose_all(&h);
        ch_step(&h, NULL);
        ch_seq *first = ch_find(&h, ids[0]);
        /* Fork the first sequence once it has sampled two tokens. */
        if (!forked && !first->ended && first->num_tokens >= PROMPT + 2 &&
            first->num_tokens < PROMPT + NEW) {
            pkv_seq_id child;
            uint32_t faults = h.faults;
            pkv_status st = ch_fork(&h, ids[0], -1, &child);
            if (st == PKV_OK) {
                ids[NSEQ] = child;
                forked = 1;
            } else if (h.faults == faults) {
                assert_int_equal(st, PKV_ERR_BAD_STATE); /* swapped out */
            } /* else the injected fault (counted): fork again next step */
        }
        char why[256];
        if (pkv__engine_check(h.engine, why, sizeof why) != NULL)
            fail_msg("fail_at %ld, step %u: %s", fail, step, why);
    }
    assert_true(forked);
    for (uint32_t i = 0; i <= NSEQ; i++) {
        ch_seq *s = ch_find(&h, ids[i]);
        if (!s->ended || s->reason != PKV_FINISH_REASON_LENGTH)
            fail_msg("fail_at %ld: seq %llu ended %d, reason %d, status %d",
                     fail, (unsigned long long)ids[i], s->ended,
                     s->reason, s->status);
        o->num_tokens[i] = s->num_tokens;
        memcpy(o->tokens[i], s->tokens, s->num_tokens * sizeof *s->tokens);
    }
    o->faults = h.faults;
    alloc_armed = 0;
#ifdef PKV_HAVE_OPENCL
    cl_armed = 0;
#endif
    ch_check_idle(&h);
    ch_free(&h);
    return calls;
}

static void sweep(int at, int32_t backend, int32_t mode, int32_t dtype)
{
    outcome clean, faulted;
    long absorbed = 0, unreached = 0;
    memset(&clean, 0, sizeof clean);
    long total = run(at, backend, mode, dtype, 0, &clean);
    assert_int_equal(clean.faults, 0);
    for (long n = 1; n <= total; n++) {
        memset(&faulted, 0, sizeof faulted);
        long made = run(at, backend, mode, dtype, n, &faulted);
        /* The OpenCL backend wraps a host tensor where its address allows
         * and copies it otherwise, so a run's OpenCL calls vary by a few
         * with malloc's addresses: a run may end before its Nth. */
        if (made < n) {
            assert_int_equal(at, AT_OPENCL);
            unreached++;
        }
        /* A failed swap or copy costs its sequence the step, not the call:
         * the host sees no error then (nor when a swap-out's host memory
         * or a prefix registration's fails). */
        assert_true(faulted.faults <= 1);
        absorbed += faulted.faults == 0;
        for (uint32_t i = 0; i <= NSEQ; i++) {
            assert_int_equal(faulted.num_tokens[i], clean.num_tokens[i]);
            if (memcmp(faulted.tokens[i], clean.tokens[i],
                       clean.num_tokens[i] * sizeof *clean.tokens[i]) != 0)
                fail_msg("fail_at %ld: seq %u's tokens differ", n, i);
        }
    }
    assert_true(unreached <= 16); /* a few at the end, as said above */
    print_message("%ld %s calls, each failed once (%ld absorbed by the "
                  "engine, %ld not reached)\n",
                  total,
                  at == AT_BACKEND  ? "backend"
                  : at == AT_OPENCL ? "OpenCL"
                                    : "allocation",
                  absorbed,
                  unreached);
}

static void test_faults_swap_f32(void **state)
{
    (void)state;
    sweep(AT_BACKEND, PKV_BACKEND_KIND_CPU, PKV_PREEMPT_MODE_SWAP,
          PKV_KV_DTYPE_F32);
}

static void test_faults_recompute_f32(void **state)
{
    (void)state;
    sweep(AT_BACKEND, PKV_BACKEND_KIND_CPU, PKV_PREEMPT_MODE_RECOMPUTE,
          PKV_KV_DTYPE_F32);
}

static void test_faults_swap_u8(void **state)
{
    (void)state;
    sweep(AT_BACKEND, PKV_BACKEND_KIND_CPU, PKV_PREEMPT_MODE_SWAP,
          PKV_KV_DTYPE_U8);
    sweep(AT_BACKEND, PKV_BACKEND_KIND_CPU, PKV_PREEMPT_MODE_SWAP,
          PKV_KV_DTYPE_U4);
}

/* Every allocation from the first step on: a step_begin whose plan or
 * reservations fail for memory changes nothing, and the host's repeat
 * runs the same plan. */
static void test_faults_memory_swap_f32(void **state)
{
    (void)state;
    sweep(AT_ALLOC, PKV_BACKEND_KIND_CPU, PKV_PREEMPT_MODE_SWAP,
          PKV_KV_DTYPE_F32);
}

static void test_faults_memory_recompute_u8(void **state)
{
    (void)state;
    sweep(AT_ALLOC, PKV_BACKEND_KIND_CPU, PKV_PREEMPT_MODE_RECOMPUTE,
          PKV_KV_DTYPE_U8);
}

/* The same engine paths over real device buffers (PoCL in tests/run.sh),
 * skipped without an OpenCL device: the faults injected at the backend's
 * interface, then inside the OpenCL backend, at every enqueue, buffer
 * creation, kernel argument and wait it makes. */
static int have_opencl(void)
{
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_OPENCL);
    pkv_engine *e = NULL;
    if (pkv_engine_create(&p, &e) != PKV_OK) {
        print_message("no OpenCL device: %s\n", pkv_last_error());
        return 0;
    }
    pkv_engine_destroy(e);
    return 1;
}

static void test_faults_opencl_swap_u8(void **state)
{
    (void)state;
    if (!have_opencl())
        skip();
    sweep(AT_BACKEND, PKV_BACKEND_KIND_OPENCL, PKV_PREEMPT_MODE_SWAP,
          PKV_KV_DTYPE_U8);
    sweep(AT_BACKEND, PKV_BACKEND_KIND_OPENCL, PKV_PREEMPT_MODE_SWAP,
          PKV_KV_DTYPE_U4);
}

static void test_faults_opencl_calls_swap_u8(void **state)
{
    (void)state;
    if (!have_opencl())
        skip();
#ifdef PKV_HAVE_OPENCL
    sweep(AT_OPENCL, PKV_BACKEND_KIND_OPENCL, PKV_PREEMPT_MODE_SWAP,
          PKV_KV_DTYPE_U8);
#endif
}

static void test_faults_opencl_calls_recompute_f16(void **state)
{
    (void)state;
    if (!have_opencl())
        skip();
#ifdef PKV_HAVE_OPENCL
    sweep(AT_OPENCL, PKV_BACKEND_KIND_OPENCL, PKV_PREEMPT_MODE_RECOMPUTE,
          PKV_KV_DTYPE_F16);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_faults_swap_f32),
        cmocka_unit_test(test_faults_recompute_f32),
        cmocka_unit_test(test_faults_swap_u8),
        cmocka_unit_test(test_faults_memory_swap_f32),
        cmocka_unit_test(test_faults_memory_recompute_u8),
        cmocka_unit_test(test_faults_opencl_swap_u8),
        cmocka_unit_test(test_faults_opencl_calls_swap_u8),
        cmocka_unit_test(test_faults_opencl_calls_recompute_f16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
