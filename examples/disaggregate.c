/* SPDX-License-Identifier: MIT */
/*
 * Prefill on one engine, decode on another: pkv_seq_export after the
 * prompt's step, the bytes through a file (as they would go through a
 * socket to another process), pkv_seq_import into an engine with another
 * block size, and decoding there without recomputing the prompt. The same
 * request decoded on the first engine throughout gives the same tokens;
 * the program checks that and exits 1 otherwise.
 * The toy model is examples/minimal.c's.
 *
 *   cc disaggregate.c $(pkg-config --cflags --libs pkv) -lm -o disagg
 */
#include <pkv/pkv.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { LAYERS = 2, Q_HEADS = 4, KV_HEADS = 2, HEAD_DIM = 16, VOCAB = 100 };
enum { MAX_ROWS = 64, NEW_TOKENS = 12 };

static void project(int32_t token, uint32_t pos, uint32_t layer, float *row,
                    uint32_t heads)
{
    for (uint32_t i = 0; i < heads * HEAD_DIM; i++)
        row[i] = sinf(0.1f * (float)token + 0.01f * (float)pos +
                      0.3f * (float)layer + 0.7f * (float)i);
}

static pkv_tensor tensor(float *data, uint32_t rows, uint32_t heads)
{
    pkv_tensor t =
        pkv_tensor_host(data, 0, PKV_TENSOR_DTYPE_F32, rows, heads, HEAD_DIM);
    return t;
}

static int check(pkv_engine *e, pkv_status st, const char *what)
{
    if (st == PKV_OK)
        return 0;
    fprintf(stderr, "%s: %s\n", what,
            e ? pkv_engine_last_error(e) : pkv_last_error());
    return 1;
}

static pkv_engine *create(uint32_t block_size)
{
    pkv_engine_params params;
    pkv_engine_params_init(&params);
    params.num_layers = LAYERS;
    params.num_q_heads = Q_HEADS;
    params.num_kv_heads = KV_HEADS;
    params.head_dim = HEAD_DIM;
    params.vocab_size = VOCAB;
    params.block_size = block_size;
    params.cache_bytes = 8 << 20;
    params.max_batch_tokens = MAX_ROWS;
    pkv_engine *e = NULL;
    return check(NULL, pkv_engine_create(&params, &e), "create") ? NULL : e;
}

/* One step of the toy model; the step's samples (one sequence here) are
 * appended to tokens and its rows added to *rows. Returns 0 on success. */
static int step(pkv_engine *e, int32_t *tokens, uint32_t *num_tokens,
                uint32_t *rows)
{
    static float q[MAX_ROWS * Q_HEADS * HEAD_DIM];
    static float k[MAX_ROWS * KV_HEADS * HEAD_DIM];
    static float v[MAX_ROWS * KV_HEADS * HEAD_DIM];
    static float out[MAX_ROWS * Q_HEADS * HEAD_DIM];
    const pkv_batch *b;
    if (check(e, pkv_engine_step_begin(e, &b), "step_begin"))
        return 1;
    uint32_t T = b->num_tokens;
    *rows += T;
    for (uint32_t layer = 0; layer < LAYERS; layer++) {
        for (uint32_t r = 0; r < T; r++) {
            project(b->token_ids[r], b->positions[r], layer,
                    q + r * Q_HEADS * HEAD_DIM, Q_HEADS);
            project(b->token_ids[r] + 1, b->positions[r], layer,
                    k + r * KV_HEADS * HEAD_DIM, KV_HEADS);
            project(b->token_ids[r] + 2, b->positions[r], layer,
                    v + r * KV_HEADS * HEAD_DIM, KV_HEADS);
        }
        pkv_tensor tq = tensor(q, T, Q_HEADS), tk = tensor(k, T, KV_HEADS);
        pkv_tensor tv = tensor(v, T, KV_HEADS), to = tensor(out, T, Q_HEADS);
        if (check(e, pkv_engine_attend(e, layer, &tq, &tk, &tv, &to),
                  "attend"))
            return 1;
    }
    int32_t sampled[1] = {0};
    for (uint32_t j = 0; j < b->num_samples; j++) {
        const float *row = out + b->sample_rows[j] * Q_HEADS * HEAD_DIM;
        uint32_t best = 0;
        for (uint32_t i = 1; i < Q_HEADS * HEAD_DIM; i++)
            best = row[i] > row[best] ? i : best;
        sampled[j] = (int32_t)(best % VOCAB);
        tokens[(*num_tokens)++] = sampled[j];
    }
    return check(e, pkv_engine_step_end(e, sampled, NULL, b->num_samples),
                 "step_end");
}

static int add(pkv_engine *e, const int32_t *prompt, uint32_t len,
               pkv_seq_id *id)
{
    pkv_seq_params sp;
    pkv_seq_params_init(&sp);
    sp.prompt = prompt;
    sp.prompt_len = len;
    sp.max_new_tokens = NEW_TOKENS;
    return check(e, pkv_seq_add(e, &sp, id), "add");
}

int main(void)
{
    const int32_t prompt[10] = {5, 17, 3, 42, 8, 8, 61, 2, 30, 11};
    int32_t alone[NEW_TOKENS], moved[NEW_TOKENS];
    uint32_t n_alone = 0, n_moved = 0, rows_alone = 0, rows_prefill = 0;
    uint32_t rows_decode = 0;
    pkv_seq_id id;

    /* The reference: prompt and decoding on one engine. */
    pkv_engine *ref = create(16);
    if (ref == NULL || add(ref, prompt, 10, &id))
        return 1;
    while (pkv_engine_has_work(ref))
        if (step(ref, alone, &n_alone, &rows_alone))
            return 1;
    pkv_engine_destroy(ref);

    /* The prefill engine runs the prompt's step (which samples the first
     * token), exports the sequence and lets it go. */
    pkv_engine *prefill = create(16), *decode = create(32);
    if (prefill == NULL || decode == NULL ||
        add(prefill, prompt, 10, &id) ||
        step(prefill, moved, &n_moved, &rows_prefill))
        return 1;
    size_t size = 0;
    if (check(prefill, pkv_seq_export(prefill, id, NULL, 0, &size),
              "export size"))
        return 1;
    void *bytes = malloc(size);
    FILE *f = tmpfile();
    if (bytes == NULL || f == NULL ||
        check(prefill, pkv_seq_export(prefill, id, bytes, size, &size),
              "export") ||
        check(prefill, pkv_seq_abort(prefill, id), "abort") ||
        fwrite(bytes, 1, size, f) != size)
        return 1;
    printf("prefill engine: %u rows, exported %zu bytes\n", rows_prefill,
           size);

    /* The decode engine reads the bytes back and goes on. */
    rewind(f);
    if (fread(bytes, 1, size, f) != size)
        return 1;
    fclose(f);
    pkv_seq_id imported;
    if (check(decode, pkv_seq_import(decode, NULL, bytes, size, &imported),
              "import"))
        return 1;
    free(bytes);
    while (pkv_engine_has_work(decode))
        if (step(decode, moved, &n_moved, &rows_decode))
            return 1;
    /* One row per sampled token: the prompt was not computed again. */
    printf("decode engine: %u rows for %u tokens; one engine alone: %u "
           "rows\n",
           rows_decode, n_moved - 1, rows_alone);
    pkv_engine_destroy(prefill);
    pkv_engine_destroy(decode);

    int same = n_moved == n_alone && rows_decode == n_moved - 1;
    for (uint32_t i = 0; same && i < n_alone; i++)
        same = moved[i] == alone[i];
    printf("tokens:");
    for (uint32_t i = 0; i < n_moved; i++)
        printf(" %d", moved[i]);
    printf("\n%s as on one engine\n", same ? "the same" : "NOT the same");
    return same ? 0 : 1;
}
