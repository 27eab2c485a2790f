/* SPDX-License-Identifier: MIT */
/* What the KV store keeps of each sequence (store/engine_store.c), held
 * in the sequence (seq.h). */
#ifndef PKV_STORE_STORE_SEQ_H
#define PKV_STORE_STORE_SEQ_H

#include <stdint.h>

enum pkv__store_seq_state {
    PKV__STORE_NOT_ASKED = 0,
    PKV__STORE_LOADING = 1,
    PKV__STORE_ASKED = 2
};

/* Whether its blocks were asked of the store (enum pkv__store_seq_state),
 * and the SHA-256 chain of its tokens as far as it was needed: the root,
 * then one digest per full block, num_digests of digests_capacity bytes /
 * 32. */
typedef struct pkv__store_seq {
    uint8_t state;
    uint8_t *digests;
    uint32_t num_digests;
    uint32_t digests_capacity; /* in bytes */
} pkv__store_seq;

#endif
