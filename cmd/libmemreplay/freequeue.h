/*
 * freequeue.h: the queue of deferred frees, in C memory, shared by the C
 * side (shim.c pushes from memreplay_free, without entering Go) and the Go
 * side (freequeue.go applies the entries, in order, at the start of the
 * next call that enters Go). freequeue.go explains the protocol.
 *
 * A ring of MR_FQ_LEN slots and two counters: tail, the tickets pushers
 * have taken, and done, the entries the consumer has applied. A pusher
 * takes ticket t with a compare-and-swap on tail, only while t - done <
 * MR_FQ_LEN (the slot's previous entry, ticket t - MR_FQ_LEN, is applied),
 * writes the pointer, and publishes the slot by storing t + 1 in its
 * sequence number (release). The one consumer at a time (Go, under the
 * library's queue lock) waits for that number, reads the pointer, applies
 * the free, and only then advances done, which both counts the entry as
 * applied and hands its slot back to the pushers: one atomic store per
 * entry on the consumer's side.
 */
#ifndef MEMREPLAY_FREEQUEUE_H
#define MEMREPLAY_FREEQUEUE_H

#include <stdint.h>
#include <stdlib.h>

/* MR_FQ_LEN is the ring's size in entries (a power of two): the most frees
 * that wait for the next call. A push into a full ring fails, and
 * memreplay_free then enters Go and applies the queue itself. */
#define MR_FQ_LEN 1024

struct mr_fq_slot {
	uint64_t seq; /* ticket + 1 once the pointer of that ticket is written */
	uint64_t ptr; /* the pointer memreplay_free was given */
	int64_t dev;  /* and its device argument: which table to look in first */
};

struct mr_fq {
	uint64_t tail;     /* tickets handed out to pushers */
	uint64_t streamed; /* live blocks with a use on another stream; written by Go */
	char pad0[48];
	uint64_t done; /* entries applied; written by the consumer only */
	char pad1[56];
	struct mr_fq_slot slot[MR_FQ_LEN];
};

/* mr_fq_live is the queue memreplay_free pushes into: the global library's,
 * or NULL while there is none (before the first call, or when recording,
 * which applies every free at its call). Set once, by Go. */
extern __attribute__((visibility("hidden"))) struct mr_fq *mr_fq_live;

/* mr_fq_new allocates an empty ring: all zero, no slot published. */
static inline struct mr_fq *mr_fq_new(void) { return calloc(1, sizeof(struct mr_fq)); }

static inline void mr_fq_publish(struct mr_fq *q) { __atomic_store_n(&mr_fq_live, q, __ATOMIC_RELEASE); }

/* mr_fq_claim takes the next ticket, or returns -1 if the ring is full.
 * Its slot must then be filled (mr_fq_fill): the consumer waits for it. */
static inline int64_t mr_fq_claim(struct mr_fq *q) {
	uint64_t pos = __atomic_load_n(&q->tail, __ATOMIC_RELAXED);
	for (;;) {
		/* done only grows, so a stale done can only make the ring look
		 * fuller than it is; a pos older than done (signed: negative)
		 * fails the compare-and-swap below and is reloaded. */
		uint64_t done = __atomic_load_n(&q->done, __ATOMIC_ACQUIRE);
		if ((int64_t)(pos - done) >= MR_FQ_LEN)
			return -1;
		if (__atomic_compare_exchange_n(&q->tail, &pos, pos + 1, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			return (int64_t)pos;
		/* another pusher took the ticket; pos now holds the tail */
	}
}

/* mr_fq_fill writes p and its device into the slot of ticket t and
 * publishes it. */
static inline void mr_fq_fill(struct mr_fq *q, uint64_t t, uint64_t p, int64_t dev) {
	struct mr_fq_slot *s = &q->slot[t & (MR_FQ_LEN - 1)];
	__atomic_store_n(&s->ptr, p, __ATOMIC_RELAXED);
	__atomic_store_n(&s->dev, dev, __ATOMIC_RELAXED);
	__atomic_store_n(&s->seq, t + 1, __ATOMIC_RELEASE);
}

/* mr_fq_push queues p, freed with device argument dev; 0 if the ring is
 * full. */
static inline int mr_fq_push(struct mr_fq *q, uint64_t p, int64_t dev) {
	int64_t t = mr_fq_claim(q);
	if (t < 0)
		return 0;
	mr_fq_fill(q, (uint64_t)t, p, dev);
	return 1;
}

/* mr_fq_defer is memreplay_free's choice: queue p (1), or not (0: the
 * caller enters Go and applies it now). A free of a block used on other
 * streams (record_stream) records events on them, which must cover the
 * work queued so far and no more, as PyTorch's do: so while any such block
 * is live, frees are applied at their call. */
static inline int mr_fq_defer(struct mr_fq *q, uint64_t p, int64_t dev) {
	return __atomic_load_n(&q->streamed, __ATOMIC_ACQUIRE) == 0 && mr_fq_push(q, p, dev);
}

#endif /* MEMREPLAY_FREEQUEUE_H */
