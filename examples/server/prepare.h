/* SPDX-License-Identifier: MIT */
/*
 * A parsed request made a job: its prompt tokenized (a completion's text
 * as plain text, BOS first where the model asks for it; a chat's messages
 * in the model's chat template), its length checked against the
 * sequence's context, max_tokens defaulted and bounded, its sampling
 * settings, stop strings and deadline set. On the HTTP side's threads:
 * the tokenizer is only read.
 */
#ifndef PKV_SERVER_PREPARE_H
#define PKV_SERVER_PREPARE_H

#include "job.h"
#include "request.h"
#include "server.h"

/* 0, or -1 with e filled (400: no chat template, a prompt that does not
 * fit; 500 out of memory). */
int srv_job_prepare(const srv_server *s, srv_job *j, const srv_request *r,
                    srv_error *e);

#endif
