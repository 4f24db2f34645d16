/* state-pool.c - recurrent state slots; see state-pool.h. */
#include "engine/state-pool.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct hr_state_pool {
    uint32_t n_slots, n_used;
    uint64_t slot_floats;
    uint64_t stride;      /* bytes between slots: slot bytes rounded up to pages */
    float *mem;           /* n_slots x stride, one anonymous mapping */
    uint64_t mem_bytes;
    const void **owner;   /* per slot; NULL: free */
};

static enum hr_status pool_init(uint32_t n_slots, uint64_t slot_floats, bool books,
                                struct hr_state_pool **out, struct hr_err *err)
{
    *out = NULL;
    struct hr_state_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    if (n_slots && slot_floats) {
        if (slot_floats > UINT64_MAX / sizeof(float) / n_slots) {
            free(p);
            return hr_err_set(err, HR_ERR_NOMEM, "recurrent state of %u slots overflows",
                              n_slots);
        }
        p->n_slots = n_slots;
        p->slot_floats = slot_floats;
        /* Page-aligned slots, so a freed slot's pages can go back to the OS
         * and what is resident is the slots in use. A books-only pool's
         * bytes live elsewhere (a device): its slots are packed there. */
        const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
        const uint64_t bytes = slot_floats * sizeof(float);
        p->stride = books ? bytes : (bytes + page - 1) / page * page;
        if (p->stride > UINT64_MAX / n_slots) {
            free(p);
            return hr_err_set(err, HR_ERR_NOMEM, "recurrent state of %u slots overflows",
                              n_slots);
        }
        p->mem_bytes = (uint64_t)n_slots * p->stride;
        /* Zero pages until used; each slot is written whole when bound. */
        if (!books)
            p->mem = mmap(NULL, p->mem_bytes, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        p->owner = calloc(n_slots, sizeof(*p->owner));
        if (p->mem == MAP_FAILED || !p->owner) {
            if (p->mem == MAP_FAILED)
                p->mem = NULL;
            hr_state_pool_free(p);
            return hr_err_set(err, HR_ERR_NOMEM, "cannot allocate %llu bytes of recurrent state "
                              "(%u slots)", (unsigned long long)(n_slots * slot_floats * 4),
                              n_slots);
        }
    }
    *out = p;
    return HR_OK;
}

enum hr_status hr_state_pool_init(uint32_t n_slots, uint64_t slot_floats,
                                  struct hr_state_pool **out, struct hr_err *err)
{
    return pool_init(n_slots, slot_floats, false, out, err);
}

enum hr_status hr_state_pool_init_books(uint32_t n_slots, uint64_t slot_floats,
                                        struct hr_state_pool **out, struct hr_err *err)
{
    return pool_init(n_slots, slot_floats, true, out, err);
}

void hr_state_pool_free(struct hr_state_pool *p)
{
    if (!p)
        return;
    if (p->mem)
        munmap(p->mem, p->mem_bytes);
    free(p->owner);
    free(p);
}

int32_t hr_state_find(const struct hr_state_pool *p, const void *owner)
{
    for (uint32_t i = 0; i < p->n_slots; i++)
        if (p->owner[i] == owner)
            return (int32_t)i;
    return -1;
}

int32_t hr_state_acquire(struct hr_state_pool *p, const void *owner)
{
    int32_t i = hr_state_find(p, owner);
    if (i >= 0)
        return i;
    for (uint32_t j = 0; j < p->n_slots; j++)
        if (!p->owner[j]) {
            p->owner[j] = owner;
            p->n_used++;
            return (int32_t)j;
        }
    return -1;
}

void hr_state_release(struct hr_state_pool *p, const void *owner)
{
    if (!p || !owner)
        return;
    const int32_t i = hr_state_find(p, owner);
    if (i >= 0) {
        p->owner[i] = NULL;
        p->n_used--;
        if (p->mem)
            (void)madvise(hr_state_slot(p, i), p->stride, MADV_DONTNEED);
    }
}

float *hr_state_slot(struct hr_state_pool *p, int32_t i)
{
    if (!p->mem)
        return NULL;
    return (float *)((uint8_t *)p->mem + (uint64_t)i * p->stride);
}

/* NULL is a pool with no slots (a backend without recurrent state). */
uint32_t hr_state_n_slots(const struct hr_state_pool *p) { return p ? p->n_slots : 0; }
uint32_t hr_state_n_used(const struct hr_state_pool *p) { return p ? p->n_used : 0; }
uint64_t hr_state_slot_bytes(const struct hr_state_pool *p)
{
    return p ? p->slot_floats * sizeof(float) : 0;
}
uint64_t hr_state_pool_bytes(const struct hr_state_pool *p) { return p ? p->mem_bytes : 0; }
