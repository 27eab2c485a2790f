/* SPDX-License-Identifier: MIT */
/*
 * The driver of bench/step_rooms.py: one step followed as data. It runs a
 * fixed workload through the public API on the CPU backend (hybrid
 * memory's groups: a full layer and a windowed one; sequences sharing a
 * prompt, added a step apart, so that each admission hits the prefix
 * cache) and records every function the library enters and leaves
 * during the pkv_engine_step_begin and the pkv_engine_step_end of its
 * 24th step, in which 23 sequences decode (the windowed group's blocks
 * slide) and the 24th is admitted with a hit of 4 blocks. The library is
 * built with -finstrument-functions; this file is not. The trace goes to
 * the file named by argv[1], a line per event: "> address" on entry,
 * "< address" on exit, and "= name" before each traced call.
 */
#include "pkv/pkv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LAYERS = 2, HEADS = 2, DIM = 8, SEQS = 24, PROMPT = 40 };

static FILE *trace;

void __cyg_profile_func_enter(void *fn, void *site)
    __attribute__((no_instrument_function));
void __cyg_profile_func_exit(void *fn, void *site)
    __attribute__((no_instrument_function));

void __cyg_profile_func_enter(void *fn, void *site)
{
    (void)site;
    if (trace != NULL)
        fprintf(trace, "> %p\n", fn);
}

void __cyg_profile_func_exit(void *fn, void *site)
{
    (void)site;
    if (trace != NULL)
        fprintf(trace, "< %p\n", fn);
}

static void die(const char *what, pkv_engine *e)
{
    fprintf(stderr, "step_rooms: %s: %s\n", what,
            e != NULL ? pkv_engine_last_error(e) : pkv_last_error());
    exit(1);
}

/* One step; the traced one records its step_begin and step_end. */
static void step(pkv_engine *e, FILE *traced)
{
    static float q[4096 * HEADS * DIM], out[4096 * HEADS * DIM];
    static int32_t sampled[4096];
    const pkv_batch *b;
    trace = traced;
    if (traced != NULL)
        fprintf(traced, "= pkv_engine_step_begin\n");
    if (pkv_engine_step_begin(e, &b) != PKV_OK)
        die("step_begin", e);
    trace = NULL;
    for (uint32_t i = 0; i < b->num_tokens * HEADS * DIM; i++)
        q[i] = (float)((i * 7u) % 13u) / 13.0f;
    pkv_tensor tq = pkv_tensor_host(q, 0, PKV_TENSOR_DTYPE_F32,
                                    b->num_tokens, HEADS, DIM);
    pkv_tensor to = pkv_tensor_host(out, 0, PKV_TENSOR_DTYPE_F32,
                                    b->num_tokens, HEADS, DIM);
    for (uint32_t l = 0; l < LAYERS; l++)
        if (pkv_engine_attend(e, l, &tq, &tq, &tq, &to) != PKV_OK)
            die("attend", e);
    for (uint32_t j = 0; j < b->num_samples; j++)
        sampled[j] = (int32_t)(j % 50u) + 1;
    trace = traced;
    if (traced != NULL)
        fprintf(traced, "= pkv_engine_step_end\n");
    if (pkv_engine_step_end(e, sampled, NULL, b->num_samples) != PKV_OK)
        die("step_end", e);
    trace = NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: step_rooms TRACE_FILE\n");
        return 2;
    }
    static const uint32_t windows[LAYERS] = {0, 16};
    pkv_engine_params p;
    pkv_engine_params_init(&p);
    p.num_layers = LAYERS;
    p.num_q_heads = HEADS;
    p.num_kv_heads = HEADS;
    p.head_dim = DIM;
    p.block_size = 8;
    p.num_blocks = 256;
    p.kv_dtype = PKV_KV_DTYPE_F32;
    p.backend = PKV_BACKEND_KIND_CPU;
    p.layer_windows = windows;
    p.hybrid_memory = 1;
    p.max_batch_tokens = 64;
    p.long_prefill_threshold = 32;
    p.watermark = 0;
    pkv_engine *e;
    if (pkv_engine_create(&p, &e) != PKV_OK)
        die("create", NULL);
    int32_t prompt[PROMPT];
    for (uint32_t i = 0; i < PROMPT; i++)
        prompt[i] = (int32_t)(i * 31u % 97u) + 1;
    pkv_seq_params sp;
    pkv_seq_params_init(&sp);
    sp.prompt = prompt;
    sp.prompt_len = PROMPT;
    sp.max_new_tokens = 64;
    pkv_seq_id id;
    /* The first computes the shared prompt; the rest, added over the
     * steps, hit it. */
    if (pkv_seq_add(e, &sp, &id) != PKV_OK)
        die("add", e);
    for (uint32_t s = 1; s < SEQS; s++) {
        step(e, NULL);
        prompt[PROMPT - 1] = (int32_t)s + 200;
        if (pkv_seq_add(e, &sp, &id) != PKV_OK)
            die("add", e);
    }
    FILE *f = fopen(argv[1], "w");
    if (f == NULL) {
        perror(argv[1]);
        return 1;
    }
    step(e, f);
    fclose(f);
    pkv_engine_stats st;
    pkv_engine_stats_init(&st);
    pkv_engine_get_stats(e, &st);
    fprintf(stderr,
            "step_rooms: traced step %llu: %u running, %u waiting, %llu "
            "prefix hit tokens so far\n",
            (unsigned long long)st.steps, st.num_running, st.num_waiting,
            (unsigned long long)st.prefix_hit_tokens);
    pkv_engine_destroy(e);
    return 0;
}
