/* SPDX-License-Identifier: MIT */
/* The step's device actions (step_actions.c): what applying a plan
 * recorded (step_state.h's pkv__action) run on the backend, and the
 * step's rows given back when the backend refuses the step. */
#ifndef PKV_STEP_ACTIONS_H
#define PKV_STEP_ACTIONS_H

#include "engine_error.h"
#include "seqs.h"
#include "step_state.h"

/* Run the plan's device actions in order, each run of copy-on-write
 * copies as one backend call, through the KV-cache manager. One that
 * fails costs its sequence (a failed run: each of its sequences) this
 * step, never the step or the sequence's tokens: it is taken out of
 * step->step_seqs[0 .. *num_seqs), and logged to log. */
void pkv__step_run_actions(pkv__step_state *step, pkv__seqs *seqs,
                           const pkv__engine_message *log,
                           uint32_t *num_seqs);

/* The backend refused the step: give back the slots the plan gave the
 * rows of step->step_seqs[0 .. num_seqs), as if it had scheduled none.
 * What the actions did (swaps, copies) stands: it left every sequence
 * consistent. */
void pkv__step_unplan_rows(const pkv__step_state *step, pkv__seqs *seqs,
                           uint32_t num_seqs);

#endif
