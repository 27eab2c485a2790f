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
