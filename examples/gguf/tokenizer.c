/* SPDX-License-Identifier: MIT */
/* The GGUF host's tokenizer, by vocabulary (tokenizer.h). */
#include "tokenizer.h"

#include <string.h>

int gg_tokenizer_init(gg_tokenizer *t, const gg_file *f, char *err,
                      size_t err_size)
{
    const gg_file_config *c = &f->config;
    memset(t, 0, sizeof *t);
    t->kind = c->vocab_kind;
    t->n = c->vocab_size;
    t->bos = c->bos;
    t->add_bos = c->add_bos ? GG_ADD_BOS : 0;
    if (t->kind == GG_VOCAB_SPM)
        return gg_spm_init(&t->spm, f->vocab, c->vocab_size, c, err,
                           err_size);
    return gg_bpe_init(&t->bpe, f->vocab, c->vocab_size, f->merges,
                       c->num_merges, c, err, err_size);
}

void gg_tokenizer_free(gg_tokenizer *t)
{
    if (t->kind == GG_VOCAB_SPM)
        gg_spm_free(&t->spm);
    else
        gg_bpe_free(&t->bpe);
}

int gg_tokenize(const gg_tokenizer *t, const char *text, size_t len,
                unsigned flags, int32_t *out, uint32_t max_out)
{
    return t->kind == GG_VOCAB_SPM
               ? gg_spm_tokenize(&t->spm, text, len, flags, out, max_out)
               : gg_bpe_tokenize(&t->bpe, text, len, flags, out, max_out);
}

uint32_t gg_tokenize_bound(const gg_tokenizer *t, size_t len,
                           unsigned flags)
{
    return t->kind == GG_VOCAB_SPM ? gg_spm_bound(&t->spm, len, flags)
                                   : gg_bpe_bound(len, flags);
}

size_t gg_detokenize(const gg_tokenizer *t, int32_t id, char *buf,
                     size_t size)
{
    return t->kind == GG_VOCAB_SPM
               ? gg_spm_detokenize(&t->spm, id, buf, size)
               : gg_bpe_detokenize(&t->bpe, id, buf, size);
}

int32_t gg_token_id(const gg_tokenizer *t, const char *s)
{
    return gg_pieces_find(t->kind == GG_VOCAB_SPM ? &t->spm.pieces
                                                  : &t->bpe.pieces,
                          s, strlen(s));
}
