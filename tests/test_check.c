/* SPDX-License-Identifier: MIT */
/* The engine's invariant check (src/check.h) holds on a live engine and
 * names each kind of corruption. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "check.h"
#include "engine.h"
#include "seqs.h"

#include <string.h>

/* The check's verdict must mention `what`. */
static void expect_broken(const pkv_engine *e, const char *what)
{
    char buf[256];
    const char *why = pkv__engine_check(e, buf, sizeof buf);
    if (why == NULL || strstr(why, what) == NULL)
        fail_msg("expected a broken invariant about \"%s\", got %s", what,
                 why == NULL ? "none" : why);
}

static void test_check_names_corruption(void **state)
{
    (void)state;
    pkv_engine_params p;
    assert_int_equal(pkv_engine_params_init(&p), PKV_OK);
    p.backend = PKV_BACKEND_KIND_CPU;
    p.num_layers = 1;
    p.num_q_heads = 2;
    p.num_kv_heads = 1;
    p.head_dim = 8;
    p.block_size = 16;
    p.num_blocks = 16;
    p.kv_dtype = PKV_KV_DTYPE_U8;
    pkv_engine *e = NULL;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
    int32_t prompt[40];
    for (int i = 0; i < 40; i++)
        prompt[i] = i;
    pkv_seq_params sp;
    pkv_seq_params_init(&sp);
    sp.prompt = prompt;
    sp.prompt_len = 40;
    pkv_seq_id id;
    assert_int_equal(pkv_seq_add(e, &sp, &id), PKV_OK);
    const pkv_batch *b;
    assert_int_equal(pkv_engine_step_begin(e, &b), PKV_OK);
    assert_int_equal(b->num_tokens, 40);
    char buf[256];
    assert_null(pkv__engine_check(e, buf, sizeof buf));

    pkv__seq *s = pkv__seqs_find(&e->seqs, id);
    assert_non_null(s);
    uint32_t blk = s->kv.tables[0].blocks[0];
    e->kv.pool.blocks[blk].ref_count++;
    expect_broken(e, "ref_count");
    e->kv.pool.blocks[blk].ref_count--;

    /* The pool's sum stays right: only the table sees the wrong fill. */
    e->kv.pool.blocks[s->kv.tables[0].blocks[1]].fill = 8;
    e->kv.pool.tokens_stored -= 8;
    e->kv.pool.group_tokens[0] -= 8;
    expect_broken(e, "holds 8 tokens, the table says 16");
    e->kv.pool.blocks[s->kv.tables[0].blocks[1]].fill = 16;
    e->kv.pool.tokens_stored += 8;
    e->kv.pool.group_tokens[0] += 8;
    /* A last block never holds fewer tokens than the table uses (more is
     * a truncate inside a block others hold). */
    e->kv.pool.blocks[s->kv.tables[0].blocks[2]].fill = 7;
    e->kv.pool.tokens_stored -= 1;
    e->kv.pool.group_tokens[0] -= 1;
    expect_broken(e, "holds 7 tokens, the table says 8");
    e->kv.pool.blocks[s->kv.tables[0].blocks[2]].fill = 8;
    e->kv.pool.tokens_stored += 1;
    e->kv.pool.group_tokens[0] += 1;
    /* A group's count of its blocks. */
    e->kv.pool.group_used[0]++;
    expect_broken(e, "group 0: counted");
    e->kv.pool.group_used[0]--;

    e->kv.pool.tokens_stored++;
    expect_broken(e, "tokens_stored");
    e->kv.pool.tokens_stored--;

    e->kv.pool.num_free--;
    expect_broken(e, "pool counts");
    e->kv.pool.num_free++;

    s->kv.tables[0].num_tokens--;
    expect_broken(e, "slots for 39 tokens");
    s->kv.tables[0].num_tokens++;

    s->state = PKV__SEQ_WAITING;
    expect_broken(e, "state");
    s->state = PKV__SEQ_RUNNING;

    e->kv.num_free_stages--;
    expect_broken(e, "staging tails");
    e->kv.num_free_stages++;

    e->kv.swap_used = 1;
    expect_broken(e, "swap_used");
    e->kv.swap_used = 0;

    pkv__seqs_tenant_add(&e->seqs, s->tenant, 1);
    expect_broken(e, "counted 4 blocks, holds 3");
    pkv__seqs_tenant_add(&e->seqs, s->tenant, -1);
    pkv__seqs_tenant_add(&e->seqs, 77, 2);
    expect_broken(e, "tenant map holds 2 tenants, 1 hold");
    pkv__seqs_tenant_add(&e->seqs, 77, -2);

    uint32_t room = s->token_capacity;
    s->token_capacity = s->num_tokens; /* it runs: it must have one more */
    expect_broken(e, "no room for the token it samples");
    s->token_capacity = room;

    pkv__map_put(&e->seqs.by_id, 999, 1);
    expect_broken(e, "id map holds 2 sequences, the lists 1");
    pkv__map_put(&e->seqs.by_id, 999, 0);

    assert_null(pkv__engine_check(e, buf, sizeof buf));
    pkv_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_names_corruption),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
