/* SPDX-License-Identifier: MIT */
/*
 * The smallest complete pkv host: a toy "model" whose Q/K/V rows come from
 * the token id and position, served through the engine loop that a real
 * host runs. Copy this first; examples/gguf/ runs real models.
 *
 *   cc minimal.c $(pkg-config --cflags --libs pkv) -lm -o minimal && ./minimal
 */
#include <pkv/pkv.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { LAYERS = 2, Q_HEADS = 4, KV_HEADS = 2, HEAD_DIM = 16, VOCAB = 100 };

/* The toy model's projection: a fixed function of (token, position). */
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

int main(void)
{
    pkv_engine_params params;
    pkv_engine_params_init(&params);
    params.num_layers = LAYERS;
    params.num_q_heads = Q_HEADS;
    params.num_kv_heads = KV_HEADS;
    params.head_dim = HEAD_DIM;
    params.vocab_size = VOCAB;
    params.cache_bytes = 8 << 20;
    pkv_engine *e = NULL;
    if (check(NULL, pkv_engine_create(&params, &e), "create"))
        return 1;

    /* Three requests; pkv_seq_add may be called from any thread. */
    int32_t prompts[3][6] = {{1, 2, 3, 4, 5, 6}, {1, 2, 3, 7}, {9, 8}};
    uint32_t lens[3] = {6, 4, 2};
    for (int i = 0; i < 3; i++) {
        pkv_seq_params sp;
        pkv_seq_params_init(&sp);
        sp.prompt = prompts[i];
        sp.prompt_len = lens[i];
        sp.max_new_tokens = 8;
        pkv_seq_id id;
        if (check(NULL, pkv_seq_add(e, &sp, &id), "add"))
            return 1;
    }

    float *q = NULL, *k = NULL, *v = NULL, *out = NULL;
    int32_t *sampled = NULL;
    int rc = 0;
    while (rc == 0 && pkv_engine_has_work(e)) {
        const pkv_batch *b;
        if ((rc = check(e, pkv_engine_step_begin(e, &b), "step_begin")))
            break;
        uint32_t T = b->num_tokens;
        q = realloc(q, (T + 1) * Q_HEADS * HEAD_DIM * sizeof *q);
        k = realloc(k, (T + 1) * KV_HEADS * HEAD_DIM * sizeof *k);
        v = realloc(v, (T + 1) * KV_HEADS * HEAD_DIM * sizeof *v);
        out = realloc(out, (T + 1) * Q_HEADS * HEAD_DIM * sizeof *out);
        sampled = realloc(sampled, (b->num_samples + 1) * sizeof *sampled);
        if (!q || !k || !v || !out || !sampled)
            return 1;
        for (uint32_t layer = 0; layer < LAYERS && rc == 0; layer++) {
            for (uint32_t r = 0; r < T; r++) {
                int32_t tok = b->token_ids[r];
                uint32_t pos = b->positions[r];
                project(tok, pos, layer, q + r * Q_HEADS * HEAD_DIM, Q_HEADS);
                project(tok + 1, pos, layer, k + r * KV_HEADS * HEAD_DIM,
                        KV_HEADS);
                project(tok + 2, pos, layer, v + r * KV_HEADS * HEAD_DIM,
                        KV_HEADS);
            }
            pkv_tensor tq = tensor(q, T, Q_HEADS), tk = tensor(k, T, KV_HEADS);
            pkv_tensor tv = tensor(v, T, KV_HEADS),
                       to = tensor(out, T, Q_HEADS);
            rc = check(e, pkv_engine_attend(e, layer, &tq, &tk, &tv, &to),
                       "attend");
        }
        /* "Sample": the channel with the largest output, as a token. */
        for (uint32_t j = 0; j < b->num_samples; j++) {
            const float *row = out + b->sample_rows[j] * Q_HEADS * HEAD_DIM;
            uint32_t best = 0;
            for (uint32_t i = 1; i < Q_HEADS * HEAD_DIM; i++)
                best = row[i] > row[best] ? i : best;
            sampled[j] = (int32_t)(best % VOCAB);
            printf("seq %llu -> %d\n", (unsigned long long)b->sample_seq_ids[j],
                   sampled[j]);
        }
        for (uint32_t j = 0; j < b->num_finished; j++)
            printf("seq %llu finished (reason %d, %u tokens)\n",
                   (unsigned long long)b->finished[j].id,
                   b->finished[j].reason, b->finished[j].num_generated);
        if (rc == 0)
            rc = check(e, pkv_engine_step_end(e, sampled, NULL, b->num_samples),
                       "step_end");
    }
    pkv_engine_stats stats;
    stats.struct_size = sizeof stats;
    pkv_engine_get_stats(e, &stats);
    printf("steps %llu, prefix hit tokens %llu, finished %llu\n",
           (unsigned long long)stats.steps,
           (unsigned long long)stats.prefix_hit_tokens,
           (unsigned long long)stats.seqs_finished);
    free(q);
    free(k);
    free(v);
    free(out);
    free(sampled);
    pkv_engine_destroy(e);
    return rc;
}
