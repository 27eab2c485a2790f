/* SPDX-License-Identifier: MIT */
/* The current step's state (step_state.h). */
#include "step_state.h"

#include "kv/groups.h"

#include <string.h>

/* Device actions a step can hold: a swap and, in each group, a
 * copy-on-write for its rows and one for its drafts, per sequence. */
#define ACTIONS(seqs, groups) ((seqs) * (1 + 2 * (groups)))

pkv_status pkv__step_state_init(pkv__step_state *s, const pkv__allocator *a,
                                const pkv_engine_params *p)
{
    memset(s, 0, sizeof *s);
    size_t seqs = p->max_num_seqs, rows = p->max_batch_tokens;
    s->max_seqs = p->max_num_seqs;
    s->max_rows = p->max_batch_tokens;
    s->num_layers = p->num_layers;
    s->groups = p->num_layers / pkv__groups_slots(p);
    size_t groups = s->groups;
    s->layer_done = pkv__calloc(a, s->num_layers, 1);
    s->step_seqs = pkv__calloc(a, seqs, sizeof *s->step_seqs);
    s->actions = pkv__calloc(a, ACTIONS(seqs, groups), sizeof *s->actions);
    s->copy_pairs =
        pkv__calloc(a, ACTIONS(seqs, groups), sizeof *s->copy_pairs);
    s->seq_ids = pkv__calloc(a, seqs, sizeof *s->seq_ids);
    s->seq_user_data = pkv__calloc(a, seqs, sizeof *s->seq_user_data);
    s->query_start = pkv__calloc(a, seqs + 1, sizeof *s->query_start);
    s->context_lens = pkv__calloc(a, seqs, sizeof *s->context_lens);
    s->stages = pkv__calloc(a, seqs, sizeof *s->stages);
    s->step_tables = pkv__calloc(a, seqs * groups, sizeof *s->step_tables);
    s->table_versions =
        pkv__calloc(a, seqs * groups, sizeof *s->table_versions);
    s->preempted = pkv__calloc(a, seqs, sizeof *s->preempted);
    s->seq_bad = pkv__calloc(a, seqs, 1);
    s->sample_rows = pkv__calloc(a, rows, sizeof *s->sample_rows);
    s->sample_seq_ids = pkv__calloc(a, rows, sizeof *s->sample_seq_ids);
    s->token_ids = pkv__calloc(a, rows, sizeof *s->token_ids);
    s->positions = pkv__calloc(a, rows, sizeof *s->positions);
    s->slots = pkv__calloc(a, rows * groups, sizeof *s->slots);
    s->row_bad = pkv__calloc(a, rows, 1);
    if (!s->layer_done || !s->step_seqs || !s->actions || !s->copy_pairs ||
        !s->seq_ids || !s->seq_user_data || !s->query_start ||
        !s->context_lens || !s->stages || !s->step_tables ||
        !s->table_versions || !s->preempted || !s->seq_bad ||
        !s->sample_rows || !s->sample_seq_ids || !s->token_ids ||
        !s->positions || !s->slots || !s->row_bad)
        return PKV_ERR_OUT_OF_MEMORY;
    return PKV_OK;
}

void pkv__step_state_release(pkv__step_state *s, const pkv__allocator *a)
{
    size_t seqs = s->max_seqs, rows = s->max_rows, groups = s->groups;
    pkv__free(a, s->layer_done, s->num_layers, 1);
    pkv__free(a, s->step_seqs, seqs, sizeof *s->step_seqs);
    pkv__free(a, s->actions, ACTIONS(seqs, groups), sizeof *s->actions);
    pkv__free(a, s->copy_pairs, ACTIONS(seqs, groups),
              sizeof *s->copy_pairs);
    pkv__free(a, s->seq_ids, seqs, sizeof *s->seq_ids);
    pkv__free(a, s->seq_user_data, seqs, sizeof *s->seq_user_data);
    pkv__free(a, s->query_start, seqs + 1, sizeof *s->query_start);
    pkv__free(a, s->context_lens, seqs, sizeof *s->context_lens);
    pkv__free(a, s->stages, seqs, sizeof *s->stages);
    pkv__free(a, s->step_tables, seqs * groups, sizeof *s->step_tables);
    pkv__free(a, s->table_versions, seqs * groups,
              sizeof *s->table_versions);
    pkv__free(a, s->preempted, seqs, sizeof *s->preempted);
    pkv__free(a, s->seq_bad, seqs, 1);
    pkv__free(a, s->sample_rows, rows, sizeof *s->sample_rows);
    pkv__free(a, s->sample_seq_ids, rows, sizeof *s->sample_seq_ids);
    pkv__free(a, s->token_ids, rows, sizeof *s->token_ids);
    pkv__free(a, s->positions, rows, sizeof *s->positions);
    pkv__free(a, s->slots, rows * groups, sizeof *s->slots);
    pkv__free(a, s->row_bad, rows, 1);
    pkv__free(a, s->finished, s->finished_capacity, sizeof *s->finished);
    pkv__free(a, s->finished_user_data, s->finished_user_data_capacity,
              sizeof *s->finished_user_data);
    pkv__free(a, s->hit_blocks, s->hit_blocks_capacity,
              sizeof *s->hit_blocks);
    pkv__free(a, s->scratch, s->scratch_capacity, sizeof *s->scratch);
    pkv__plan_release(&s->plan, a);
    memset(s, 0, sizeof *s);
}

pkv_status pkv__step_state_reserve(pkv__step_state *s,
                                   const pkv__allocator *a, uint32_t ended,
                                   uint32_t live, uint32_t longest_blocks)
{
    /* Scratch arrays: nothing in them survives a step, nothing to copy. */
    void *finished, *finished_user_data, *hits;
    size_t reports = (size_t)ended + live + 1;
    pkv_status st = pkv__grow(a, s->finished, &s->finished_capacity, 0,
                              reports, sizeof *s->finished, &finished);
    if (st != PKV_OK)
        return st;
    s->finished = finished;
    st = pkv__grow(a, s->finished_user_data,
                   &s->finished_user_data_capacity, 0, reports,
                   sizeof *s->finished_user_data, &finished_user_data);
    if (st != PKV_OK)
        return st;
    s->finished_user_data = finished_user_data;
    /* A plan item at most per sequence it looks at. */
    st = pkv__plan_reserve_items(&s->plan, a, (size_t)live + 1);
    if (st != PKV_OK)
        return st;
    st = pkv__grow(a, s->hit_blocks, &s->hit_blocks_capacity, 0,
                   (size_t)longest_blocks + 1, sizeof *s->hit_blocks, &hits);
    if (st != PKV_OK)
        return st;
    s->hit_blocks = hits;
    return PKV_OK;
}

void pkv__step_state_lay_out(pkv__step_state *step, pkv__kv *kv,
                             uint32_t num_seqs)
{
    uint32_t groups = pkv__kv_num_groups(kv);
    uint32_t total = 0, rows = 0, samples = 0, max_blocks = 1;
    for (uint32_t i = 0; i < num_seqs; i++)
        total += step->step_seqs[i]->step.rows;
    for (uint32_t i = 0; i < num_seqs; i++) {
        pkv__seq *s = step->step_seqs[i];
        /* The first token it reads (prefetch.h). */
        if (i + PKV__PREFETCH_AHEAD / 2 < num_seqs) {
            const pkv__seq *ahead =
                step->step_seqs[i + PKV__PREFETCH_AHEAD / 2];
            PKV__PREFETCH(ahead->tokens + ahead->num_computed);
        }
        if (pkv__kv_blocks(&s->kv) > max_blocks)
            max_blocks = pkv__kv_blocks(&s->kv);
        step->seq_ids[i] = s->id;
        step->seq_user_data[i] = s->user_data;
        step->query_start[i] = rows;
        uint32_t first = rows, end = s->num_computed + s->step.rows;
        step->context_lens[i] = end;
        step->stages[i] = pkv__kv_stage(&s->kv);
        pkv__kv_plan_windows(kv, &s->kv, s->num_computed, rows,
                             s->step.rows);
        for (uint32_t p = s->num_computed; p < end; p++, rows++) {
            step->token_ids[rows] = s->tokens[p];
            step->positions[rows] = p;
        }
        for (uint32_t g = 0; g < groups; g++) {
            const pkv__table *t = pkv__kv_table(&s->kv, g);
            uint64_t *slots = step->slots + (size_t)g * total + first;
            for (uint32_t p = s->num_computed; p < end; p++)
                *slots++ = pkv__kv_slot(kv, t, p);
            step->step_tables[g * num_seqs + i] = t->blocks;
            step->table_versions[g * num_seqs + i] = t->version;
        }
        /* The last row samples; with drafts, every row from the last
         * accepted token on. */
        for (uint32_t r = rows - 1 - s->step.drafts;
             end == s->num_tokens && r < rows; r++) {
            step->sample_rows[samples] = r;
            step->sample_seq_ids[samples++] = s->id;
        }
    }
    step->query_start[num_seqs] = rows;
    pkv_batch *b = &step->batch;
    b->num_seqs = num_seqs;
    b->num_tokens = rows;
    b->seq_ids = step->seq_ids;
    b->seq_user_data = step->seq_user_data;
    b->query_start = step->query_start;
    b->context_lens = step->context_lens;
    b->token_ids = step->token_ids;
    b->positions = step->positions;
    b->num_samples = samples;
    b->sample_rows = step->sample_rows;
    b->sample_seq_ids = step->sample_seq_ids;
    b->preempted = step->preempted;

    pkv__step *st = &step->backend_step;
    st->num_seqs = num_seqs;
    st->num_tokens = rows;
    st->query_start = step->query_start;
    st->context_lens = step->context_lens;
    st->block_tables = step->step_tables;
    st->max_blocks_per_seq = max_blocks;
    st->table_versions = step->table_versions;
    st->slots = step->slots;
    st->stages = pkv__kv_quantized(kv) ? step->stages : NULL;
    st->windows = pkv__kv_step_windows(kv);
}

void pkv__step_state_report(pkv__step_state *step, pkv__seqs *seqs,
                            pkv__inbox *inbox)
{
    uint32_t n = seqs->ended.count;
    for (uint32_t i = 0; i < n; i++) {
        pkv__seq *s = seqs->ended.items[i];
        step->finished[i] = s->finish;
        step->finished_user_data[i] = s->user_data;
        pkv__map_put(&seqs->by_id, s->id, 0);
        pkv__seq_free(s, &seqs->alloc);
    }
    seqs->ended.count = 0;
    step->batch.num_finished = n;
    step->batch.finished = step->finished;
    step->batch.finished_user_data = step->finished_user_data;
    if (n)
        pkv__inbox_retire(inbox, n);
}
