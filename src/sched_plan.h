/* SPDX-License-Identifier: MIT */
/* The scheduler's entry (sched.c; a file name apart from the system's
 * <sched.h>, which src/ on the include path would shadow): what the next
 * step runs, as a plan (plan.h). */
#ifndef PKV_SCHED_PLAN_H
#define PKV_SCHED_PLAN_H

#include "pkv/pkv.h"

/* Plan the step: running sequences, swapped, waiting, drafts. Reads the
 * engine and writes only engine->step.plan. PKV_ERR_OUT_OF_MEMORY when the
 * plan's own arrays cannot grow. */
pkv_status pkv__sched_plan(pkv_engine *engine);

#endif
