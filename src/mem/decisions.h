/*
 * decisions.h - the governor's and the scheduler's recent decisions, kept
 * for the dashboard's feed: pressure transitions, throttled prefill chunks,
 * preemptions and resumes, refusals.
 *
 * Each decision is also one log line (DESIGN.md 4.9); this ring keeps the
 * same facts as numbers so a page can draw and list them without parsing
 * text. It is one ring per process, like the log: it is written next to the
 * log line, by code that has no server handle (governor.c, sched.c), and a
 * process serves one model. Tests that run several schedulers in one
 * process see their decisions in one ring, which only the dashboard reads.
 *
 * Memory: a fixed array of HR_DECISIONS_CAP entries in static storage; the
 * oldest is overwritten. Nothing is allocated, so recording is safe inside
 * an engine step. Every function may be called from any thread: writers
 * and readers take one small mutex for the copy of one entry (or, for a
 * reader, of the entries it asks for), never across anything slow.
 *
 * Sequence numbers start at 1 and grow by one per decision, so a reader
 * that remembers the last number it saw asks for what came after it, and
 * knows it missed some when the first number it gets is not last + 1.
 */
#ifndef HR_MEM_DECISIONS_H
#define HR_MEM_DECISIONS_H

#include <stddef.h>
#include <stdint.h>

#define HR_DECISIONS_CAP 512u

enum hr_decision_kind {
    HR_DECISION_PRESSURE = 0, /* the pressure level changed */
    HR_DECISION_CHUNK = 1,    /* a prefill chunk was throttled to the headroom */
    HR_DECISION_PREEMPT = 2,  /* a running request was paused; it resumes by recompute */
    HR_DECISION_RESUME = 3,   /* a preempted request runs again */
    HR_DECISION_REFUSE = 4,   /* a request was refused (too long, or overloaded) */
    HR_DECISION_RECLAIM = 5,  /* memory was taken back (prefix-cache blocks evicted) */
    HR_DECISION_N_KINDS = 6,
};

/* "pressure", "chunk", "preempt", "resume", "refuse", "reclaim". */
const char *hr_decision_kind_name(enum hr_decision_kind k);

struct hr_decision {
    uint64_t seq;
    double t; /* hr_now_seconds() when it was recorded */
    enum hr_decision_kind kind;
    uint64_t request_id; /* the scheduler's id; 0 for pressure */
    union {
        struct { /* PRESSURE: levels are enum hr_gov_level values */
            int from, to;
            uint64_t current_bytes, soft_bytes, hard_bytes, ceiling_bytes;
        } pressure;
        struct { /* CHUNK: asked -> chosen tokens */
            uint32_t asked_tokens, chosen_tokens;
            uint64_t kv_len, headroom_bytes, planned_bytes;
        } chunk;
        struct { /* PREEMPT */
            uint32_t kv_blocks_used, kv_blocks_total, recompute_tokens;
        } preempt;
        struct { /* RESUME: how long it was paused */
            double paused_s;
        } resume;
        struct { /* REFUSE: N and M (M is 0 for overload) */
            uint32_t n_prompt, max_prompt;
            uint64_t estimated_bytes, limit_bytes;
            char why[160]; /* the refusal's message (sched.h: struct hr_sched_refusal) */
        } refuse;
        struct { /* RECLAIM */
            uint32_t blocks;
            uint64_t bytes;
        } reclaim;
    } u;
};

/* Records one decision (its seq and t are set here). */
void hr_decision_record(const struct hr_decision *d);

/* One-line helpers for the places that log these decisions. */
void hr_decision_pressure(int from, int to, uint64_t current_bytes, uint64_t soft_bytes,
                          uint64_t hard_bytes, uint64_t ceiling_bytes);
void hr_decision_chunk(uint64_t request_id, uint32_t asked_tokens, uint32_t chosen_tokens,
                       uint64_t kv_len, uint64_t headroom_bytes, uint64_t planned_bytes);
void hr_decision_preempt(uint64_t request_id, uint32_t kv_blocks_used, uint32_t kv_blocks_total,
                         uint32_t recompute_tokens);
void hr_decision_reclaim(uint32_t blocks, uint64_t bytes);

/*
 * Copies up to cap decisions with seq > after_seq, oldest first, into out,
 * and returns how many. Decisions already overwritten are skipped (the
 * first copied seq then exceeds after_seq + 1). *last_seq (may be NULL)
 * gets the newest seq recorded so far, 0 when none.
 */
size_t hr_decisions_read(uint64_t after_seq, struct hr_decision *out, size_t cap,
                         uint64_t *last_seq);

#endif
