/*
 * state-pool.h - per-sequence recurrent state slots: the `state` memory
 * category of hybrid models (qwen35, qwen35moe).
 *
 * A Gated DeltaNet layer keeps, per sequence, a fixed-size state instead of
 * KV: the conv's last inputs and one matrix per v head (model.h, struct
 * hr_deltanet). Its size does not depend on the context length, so the pool
 * is a fixed number of equal slots, allocated once at init (the byte budget
 * is n_slots x slot bytes) and never during a step, the way the KV pool
 * hands out blocks.
 *
 * A slot is bound to an owner (the engine uses the sequence's hr_kv_seq
 * address) from the step that starts the sequence at position 0 until
 * hr_state_release: a sequence restarting at position 0 (a new request in
 * the same struct, or a preempted one recomputing) keeps its slot and the
 * engine zeroes it. Binding is a linear scan of the slots: a pool holds one
 * slot per concurrent sequence (tens), and this runs once per sequence per
 * step.
 *
 * Threads: the engine thread only. Failure: init reports HR_ERR_NOMEM.
 */
#ifndef HR_ENGINE_STATE_POOL_H
#define HR_ENGINE_STATE_POOL_H

#include <stdint.h>

#include "base/status.h"

struct hr_state_pool;

/* n_slots slots of slot_floats floats each; n_slots = 0 or slot_floats = 0
 * gives an empty pool (a model without recurrent layers). */
enum hr_status hr_state_pool_init(uint32_t n_slots, uint64_t slot_floats,
                                  struct hr_state_pool **out, struct hr_err *err);
/* The same books without the bytes: slots bound and released as above,
 * whose floats live elsewhere (the CUDA engine's device allocation, slot i
 * at i x slot bytes); hr_state_slot returns NULL, hr_state_pool_bytes is
 * n_slots x slot bytes. */
enum hr_status hr_state_pool_init_books(uint32_t n_slots, uint64_t slot_floats,
                                        struct hr_state_pool **out, struct hr_err *err);
void hr_state_pool_free(struct hr_state_pool *p);

/* The slot bound to `owner`, or -1. */
int32_t hr_state_find(const struct hr_state_pool *p, const void *owner);
/* Binds a free slot to `owner` and returns it, or -1 when none is free. */
int32_t hr_state_acquire(struct hr_state_pool *p, const void *owner);
/* Unbinds owner's slot, if any. */
void hr_state_release(struct hr_state_pool *p, const void *owner);

/* Slot i's floats (slot_floats of them); NULL in a books-only pool. */
float *hr_state_slot(struct hr_state_pool *p, int32_t i);

/* The counts below read a NULL pool as one with no slots (a backend that
 * keeps no recurrent state); hr_state_release ignores NULL. */
uint32_t hr_state_n_slots(const struct hr_state_pool *p);
uint32_t hr_state_n_used(const struct hr_state_pool *p);
uint64_t hr_state_slot_bytes(const struct hr_state_pool *p);
/* The pool's reservation: n_slots x slot bytes rounded up to pages. What
 * is resident is the bound slots (a freed slot's pages are dropped): the
 * `state` category is n_used x slot bytes. */
uint64_t hr_state_pool_bytes(const struct hr_state_pool *p);

#endif
