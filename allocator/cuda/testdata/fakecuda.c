/*
 * fakecuda.c: a fake CUDA driver for the tests of allocator/cuda.
 *
 * Built by the tests with the system C compiler (gcc -shared -fPIC) and
 * loaded through the same dlopen path as the real libcuda.so.1. It exports
 * the driver entry points the package resolves, over host memory:
 *
 *   - Device memory is one arena of host address space reserved PROT_NONE
 *     at the first cuInit. Addresses inside it are handed out first fit,
 *     with the alignments of the simulator (sim/gpu/process.go, sim/gpu/vmm.go): a
 *     cuMemAlloc_v2 of 2 MiB or more is 2 MiB aligned, smaller ones 512
 *     bytes; reservations are aligned to max(granularity, 2 MiB). So the
 *     same calls give the same offsets from the arena's base as sim gives
 *     from its address base, which lets the tests compare layouts.
 *   - cuMemAlloc_v2 maps anonymous read-write pages at its address;
 *     cuMemFree_v2 maps PROT_NONE over them again (dropping the pages).
 *   - cuMemCreate makes a memfd of the page's size (physical memory);
 *     cuMemMap maps it MAP_SHARED|MAP_FIXED at the address, PROT_NONE until
 *     cuMemSetAccess mprotects it read-write, as on a GPU, where mapped
 *     memory is inaccessible until access is granted; cuMemUnmap maps the
 *     range PROT_NONE again; cuMemRelease closes the memfd. Device pointers
 *     are host pointers, so a test can write through a mapping and read the
 *     bytes back through another view of the same page.
 *   - Capacity is accounted as in sim: cuMemAlloc_v2 holds its size rounded
 *     up to the granularity, cuMemCreate its page, a primary context its
 *     overhead; cuMemGetInfo_v2 reports capacity - used.
 *   - Events complete only when the test completes them (fakecuda_complete)
 *     or a synchronising call waits: cuEventSynchronize (the event and the
 *     ones before it on its stream), cuStreamSynchronize (the stream),
 *     cuCtxSynchronize and cuMemFree_v2 (everything).
 *
 * Like sim it is stricter than the driver where that catches allocator
 * bugs: a page must be unmapped everywhere before it is released,
 * cuMemAddressFree refuses a reservation with pages mapped. A page may be
 * mapped at several addresses at once, as the driver allows (the stitch
 * policy does it).
 *
 * Test controls, all "long long f(const char *s, long long a, long long b,
 * long long c)" (called through dlsym; uncounted):
 *   fakecuda_reset(_, capacity, granularity, context)  drop everything,
 *        zero the counters; 0 keeps the default (1 GiB, 2 MiB, 0)
 *   fakecuda_fail(fn, nth, code, _)  the nth call of fn from now fails
 *        with code, once (a sticky code corrupts the context from then on)
 *   fakecuda_sticky(_, code, after, _)  the context is corrupt with code
 *        from the (after+1)th context call from now (after=0: the next)
 *   fakecuda_count(fn, failed, ...)  calls of fn so far, failed ones
 *        included; with failed != 0 the failed ones only
 *   fakecuda_complete(_, stream, all, _)  complete the events of stream
 *        (or all of them when all != 0)
 *   fakecuda_stat(name, ...)  "used", "capacity", "pending" (incomplete
 *        events), "live" (allocations + pages + reservations + events),
 *        "arena" (its base), "arena_size"
 *   fakecuda_clear_current(...)  no context current on this thread
 * The environment variable FAKECUDA_DEVICES (default 1) sets how many
 * devices cuInit finds; 0 makes it fail with CUDA_ERROR_NO_DEVICE, as a
 * machine with a driver and no GPU does. All ordinals share one memory.
 * FAKECUDA_CAPACITY (bytes) sets the capacity before the first reset, for
 * running the real-driver tests against the fake (docs/cuda.md).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cudadecl.h"

#define EXPORT __attribute__((visibility("default")))

#define MIB (1ULL << 20)
#define SMALL_ALIGN 512ULL
#define LARGE_ALIGN (2 * MIB)
#define ARENA_MIN (1ULL << 40) /* address space only: PROT_NONE, MAP_NORESERVE */

/* ---- counters and call names ---------------------------------------- */

enum {
	F_cuInit, F_cuDriverGetVersion, F_cuDeviceGetCount, F_cuDeviceGet,
	F_cuDeviceGetName, F_cuDeviceTotalMem_v2, F_cuDeviceGetAttribute,
	F_cuDevicePrimaryCtxRetain, F_cuDevicePrimaryCtxRelease_v2,
	F_cuCtxGetCurrent, F_cuCtxSetCurrent, F_cuCtxSynchronize,
	F_cuMemAlloc_v2, F_cuMemFree_v2, F_cuMemGetInfo_v2,
	F_cuMemGetAllocationGranularity, F_cuMemAddressReserve,
	F_cuMemAddressFree, F_cuMemCreate, F_cuMemMap, F_cuMemSetAccess,
	F_cuMemUnmap, F_cuMemRelease, F_cuEventCreate, F_cuEventRecord,
	F_cuEventQuery, F_cuEventSynchronize, F_cuEventDestroy_v2,
	F_cuStreamSynchronize, F_cuGetErrorName, F_cuGetErrorString,
	F_COUNT
};

static const char *fnames[F_COUNT] = {
	"cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet",
	"cuDeviceGetName", "cuDeviceTotalMem_v2", "cuDeviceGetAttribute",
	"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2",
	"cuCtxGetCurrent", "cuCtxSetCurrent", "cuCtxSynchronize",
	"cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2",
	"cuMemGetAllocationGranularity", "cuMemAddressReserve",
	"cuMemAddressFree", "cuMemCreate", "cuMemMap", "cuMemSetAccess",
	"cuMemUnmap", "cuMemRelease", "cuEventCreate", "cuEventRecord",
	"cuEventQuery", "cuEventSynchronize", "cuEventDestroy_v2",
	"cuStreamSynchronize", "cuGetErrorName", "cuGetErrorString",
};

static int fn_index(const char *name) {
	for (int i = 0; i < F_COUNT; i++)
		if (name != NULL && strcmp(fnames[i], name) == 0)
			return i;
	return -1;
}

/* ---- state ----------------------------------------------------------- */

typedef struct { uint64_t lo, hi; } span;

typedef struct { uint64_t addr, extent, phys; } allocation;

typedef struct {
	int live, fd, maps; /* maps: how many mappings it has */
	uint64_t size;
} page;

typedef struct {
	uint64_t addr, size;
	size_t page; /* the handle */
} mapping;

typedef struct {
	int live, recorded, done;
	uint64_t stream, seq;
} event;

typedef struct { int fn; long long left; CUresult code; } fault;

struct CUctx_st { int refs; };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int initialised;
static uint64_t arena, arena_size;
static uint64_t capacity = 1ULL << 30, granularity = 2 * MIB, context_overhead;
static uint64_t used;
static struct CUctx_st primary; /* one primary context, shared by all ordinals */
static __thread struct CUctx_st *current;

#define VEC(T) struct { T *v; size_t n, cap; }
static VEC(span) vfree;        /* free address ranges of the arena, sorted */
static VEC(allocation) allocs; /* cuMemAlloc_v2 segments */
static VEC(span) reservations; /* cuMemAddressReserve ranges */
static VEC(page) pages;        /* handle h is pages.v[h-1] */
static VEC(mapping) mappings;  /* cuMemMap'd ranges */
static VEC(event) events;      /* CUevent e is events.v[e-1] */
static VEC(fault) faults;
static long long counts[F_COUNT], fails[F_COUNT];
static int cur_fn; /* the call between enter and leave (the lock is held) */
static CUresult sticky;          /* the corruption, 0 while healthy */
static CUresult sticky_pending;  /* armed by fakecuda_sticky */
static long long sticky_after;   /* context calls before it strikes */
static uint64_t event_seq;

static int grow(void **v, size_t *cap, size_t n, size_t elem) {
	if (n < *cap)
		return 0;
	size_t c = *cap ? *cap * 2 : 16;
	void *p = realloc(*v, c * elem);
	if (p == NULL)
		return -1;
	*v = p;
	*cap = c;
	return 0;
}
#define PUSH(vec, x) (grow((void **)&(vec).v, &(vec).cap, (vec).n, sizeof *(vec).v) == 0 ? ((vec).v[(vec).n++] = (x), 0) : -1)
#define DEL(vec, i) (memmove(&(vec).v[i], &(vec).v[(i) + 1], ((vec).n - (i) - 1) * sizeof *(vec).v), (vec).n--)

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* ---- the arena: first-fit addresses, as sim's vaSpace ---------------- */

static int arena_init(void) {
	if (arena != 0)
		return 0;
	const char *c = getenv("FAKECUDA_CAPACITY");
	if (c != NULL && strtoull(c, NULL, 10) > 0)
		capacity = strtoull(c, NULL, 10);
	uint64_t size = capacity * 64 > ARENA_MIN ? capacity * 64 : ARENA_MIN;
	uint64_t align = 32 * MIB; /* a multiple of every granularity we accept */
	void *p = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	uint64_t base = align_up((uint64_t)(uintptr_t)p, align);
	arena = base;
	arena_size = size;
	vfree.n = 0;
	span s = {base, base + size};
	return PUSH(vfree, s);
}

static uint64_t va_alloc(uint64_t size, uint64_t align) {
	for (size_t i = 0; i < vfree.n; i++) {
		span s = vfree.v[i];
		uint64_t start = align_up(s.lo, align);
		if (start < s.lo || start >= s.hi || s.hi - start < size)
			continue;
		uint64_t end = start + size;
		if (start > s.lo && end < s.hi) {
			span tail = {end, s.hi};
			vfree.v[i].hi = start;
			if (PUSH(vfree, tail) != 0)
				return 0;
			memmove(&vfree.v[i + 2], &vfree.v[i + 1], (vfree.n - i - 2) * sizeof(span));
			vfree.v[i + 1] = tail;
		} else if (start > s.lo) {
			vfree.v[i].hi = start;
		} else if (end < s.hi) {
			vfree.v[i].lo = end;
		} else {
			DEL(vfree, i);
		}
		return start;
	}
	return 0;
}

static void va_release(uint64_t addr, uint64_t size) {
	uint64_t end = addr + size;
	size_t i = 0;
	while (i < vfree.n && vfree.v[i].lo < addr)
		i++;
	int prev = i > 0 && vfree.v[i - 1].hi == addr;
	int next = i < vfree.n && vfree.v[i].lo == end;
	if (prev && next) {
		vfree.v[i - 1].hi = vfree.v[i].hi;
		DEL(vfree, i);
	} else if (prev) {
		vfree.v[i - 1].hi = end;
	} else if (next) {
		vfree.v[i].lo = addr;
	} else {
		span s = {addr, end};
		if (PUSH(vfree, s) == 0) {
			memmove(&vfree.v[i + 1], &vfree.v[i], (vfree.n - i - 1) * sizeof(span));
			vfree.v[i] = s;
		}
	}
}

/* protect_none returns [addr, addr+size) to the reserved, inaccessible
 * state, dropping whatever was mapped there. Host pages only partly inside
 * the range (segments under 4 KiB apart) are left as they are. */
static void protect_none(uint64_t addr, uint64_t size) {
	uint64_t hp = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t lo = align_up(addr, hp), hi = (addr + size) / hp * hp;
	if (hi > lo)
		mmap((void *)(uintptr_t)lo, hi - lo, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

/* ---- entry and faults ------------------------------------------------ */

static int is_sticky(CUresult c) {
	switch (c) {
	case 226: case 700: case 702: case 710: case 714: case 715: case 716:
	case 717: case 718: case 719: case 721: case 810: case 911:
		return 1;
	}
	return 0;
}

/* enter counts a call of fn and, for calls in a context (ctx != 0), checks
 * the current context, the corruption and the armed faults. It returns
 * with the lock held; the caller unlocks via leave. */
static CUresult enter(int fn, int ctx) {
	pthread_mutex_lock(&mu);
	counts[fn]++;
	cur_fn = fn;
	if (!ctx)
		return CUDA_SUCCESS;
	if (!initialised)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (current == NULL || current->refs == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (sticky_pending) {
		if (sticky_after == 0) {
			sticky = sticky_pending;
			sticky_pending = 0;
		} else {
			sticky_after--;
		}
	}
	if (sticky)
		return sticky;
	CUresult hit = CUDA_SUCCESS;
	for (size_t i = 0; i < faults.n;) {
		if (faults.v[i].fn == fn && --faults.v[i].left == 0) {
			if (hit == CUDA_SUCCESS)
				hit = faults.v[i].code;
			DEL(faults, i);
			continue;
		}
		i++;
	}
	if (is_sticky(hit))
		sticky = hit;
	return hit;
}

static CUresult leave(CUresult rc) {
	if (rc != CUDA_SUCCESS && !(cur_fn == F_cuEventQuery && rc == CUDA_ERROR_NOT_READY))
		fails[cur_fn]++;
	pthread_mutex_unlock(&mu);
	return rc;
}

#define ENTER(fn, ctx)                         \
	do {                                   \
		CUresult rc_ = enter(F_##fn, ctx); \
		if (rc_ != CUDA_SUCCESS)       \
			return leave(rc_);     \
	} while (0)

/* ---- dropping state -------------------------------------------------- */

static void drop_all(void) {
	for (size_t i = 0; i < allocs.n; i++)
		protect_none(allocs.v[i].addr, allocs.v[i].extent);
	for (size_t i = 0; i < mappings.n; i++)
		protect_none(mappings.v[i].addr, mappings.v[i].size);
	for (size_t i = 0; i < pages.n; i++) {
		if (pages.v[i].live)
			close(pages.v[i].fd);
	}
	allocs.n = reservations.n = pages.n = events.n = faults.n = mappings.n = 0;
	vfree.n = 0;
	if (arena != 0) {
		span s = {arena, arena + arena_size};
		PUSH(vfree, s);
	}
	used = primary.refs > 0 ? context_overhead : 0;
}

/* ---- initialisation and devices -------------------------------------- */

static int device_count(void) {
	const char *s = getenv("FAKECUDA_DEVICES");
	return s ? atoi(s) : 1;
}

EXPORT CUresult cuInit(unsigned int flags) {
	ENTER(cuInit, 0);
	if (flags != 0)
		return leave(CUDA_ERROR_INVALID_VALUE);
	if (device_count() <= 0)
		return leave(CUDA_ERROR_NO_DEVICE);
	if (arena_init() != 0)
		return leave(CUDA_ERROR_OUT_OF_MEMORY);
	initialised = 1;
	return leave(CUDA_SUCCESS);
}

EXPORT CUresult cuDriverGetVersion(int *v) {
	ENTER(cuDriverGetVersion, 0);
	if (v == NULL)
		return leave(CUDA_ERROR_INVALID_VALUE);
	*v = 12080;
	return leave(CUDA_SUCCESS);
}

EXPORT CUresult cuDeviceGetCount(int *n) {
	ENTER(cuDeviceGetCount, 0);
	if (!initialised)
		return leave(CUDA_ERROR_NOT_INITIALIZED);
	*n = device_count();
	return leave(CUDA_SUCCESS);
}

static CUresult check_device(CUdevice d) {
	if (!initialised)
		return CUDA_ERROR_NOT_INITIALIZED;
	return d < 0 || d >= device_count() ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
	ENTER(cuDeviceGet, 0);
	CUresult rc = check_device(ordinal);
	if (rc == CUDA_SUCCESS)
		*d = ordinal;
	return leave(rc);
}

EXPORT CUresult cuDeviceGetName(char *buf, int len, CUdevice d) {
	ENTER(cuDeviceGetName, 0);
	CUresult rc = check_device(d);
	if (rc == CUDA_SUCCESS && len > 0) {
		strncpy(buf, "memreplay fake GPU", (size_t)len - 1);
		buf[len - 1] = 0;
	}
	return leave(rc);
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *n, CUdevice d) {
	ENTER(cuDeviceTotalMem_v2, 0);
	CUresult rc = check_device(d);
	if (rc == CUDA_SUCCESS)
		*n = capacity;
	return leave(rc);
}

EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
	ENTER(cuDeviceGetAttribute, 0);
	CUresult rc = check_device(d);
	if (rc != CUDA_SUCCESS)
		return leave(rc);
	*v = attr == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED;
	return leave(CUDA_SUCCESS);
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
	ENTER(cuDevicePrimaryCtxRetain, 0);
	CUresult rc = check_device(d);
	if (rc != CUDA_SUCCESS)
		return leave(rc);
	if (primary.refs == 0) {
		if (context_overhead > capacity - used)
			return leave(CUDA_ERROR_OUT_OF_MEMORY);
		used += context_overhead;
	}
	primary.refs++;
	*c = &primary;
	return leave(CUDA_SUCCESS);
}

/* The last release destroys the context and everything it allocated, and
 * clears the corruption, as a new context would start clean. */
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
	ENTER(cuDevicePrimaryCtxRelease_v2, 0);
	CUresult rc = check_device(d);
	if (rc != CUDA_SUCCESS)
		return leave(rc);
	if (primary.refs == 0)
		return leave(CUDA_ERROR_INVALID_CONTEXT);
	if (--primary.refs == 0) {
		drop_all();
		sticky = sticky_pending = 0;
	}
	return leave(CUDA_SUCCESS);
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *c) {
	ENTER(cuCtxGetCurrent, 0);
	*c = current;
	return leave(CUDA_SUCCESS);
}

EXPORT CUresult cuCtxSetCurrent(CUcontext c) {
	ENTER(cuCtxSetCurrent, 0);
	if (c != NULL && c != &primary)
		return leave(CUDA_ERROR_INVALID_CONTEXT);
	current = c;
	return leave(CUDA_SUCCESS);
}

/* ---- events ---------------------------------------------------------- */

static void complete_stream(uint64_t stream, uint64_t upto) {
	for (size_t i = 0; i < events.n; i++)
		if (events.v[i].live && events.v[i].recorded && events.v[i].stream == stream && events.v[i].seq <= upto)
			events.v[i].done = 1;
}

static void complete_all(void) {
	for (size_t i = 0; i < events.n; i++)
		events.v[i].done = 1;
}

static event *lookup_event(CUevent e) {
	uint64_t i = (uint64_t)(uintptr_t)e;
	if (i == 0 || i > events.n || !events.v[i - 1].live)
		return NULL;
	return &events.v[i - 1];
}

EXPORT CUresult cuEventCreate(CUevent *e, unsigned int flags) {
	ENTER(cuEventCreate, 1);
	(void)flags;
	event ev = {1, 0, 1, 0, 0};
	for (size_t i = 0; i < events.n; i++) {
		if (!events.v[i].live) {
			events.v[i] = ev;
			*e = (CUevent)(uintptr_t)(i + 1);
			return leave(CUDA_SUCCESS);
		}
	}
	if (PUSH(events, ev) != 0)
		return leave(CUDA_ERROR_OUT_OF_MEMORY);
	*e = (CUevent)(uintptr_t)events.n;
	return leave(CUDA_SUCCESS);
}

EXPORT CUresult cuEventRecord(CUevent e, CUstream s) {
	ENTER(cuEventRecord, 1);
	event *ev = lookup_event(e);
	if (ev == NULL)
		return leave(CUDA_ERROR_INVALID_HANDLE);
	ev->recorded = 1;
	ev->done = 0;
	ev->stream = (uint64_t)(uintptr_t)s;
	ev->seq = ++event_seq;
	return leave(CUDA_SUCCESS);
}

EXPORT CUresult cuEventQuery(CUevent e) {
	ENTER(cuEventQuery, 1);
	event *ev = lookup_event(e);
	if (ev == NULL)
		return leave(CUDA_ERROR_INVALID_HANDLE);
	return leave(ev->done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
}

EXPORT CUresult cuEventSynchronize(CUevent e) {
	ENTER(cuEventSynchronize, 1);
	event *ev = lookup_event(e);
	if (ev == NULL)
		return leave(CUDA_ERROR_INVALID_HANDLE);
	if (ev->recorded)
		complete_stream(ev->stream, ev->seq);
	return leave(CUDA_SUCCESS);
}

EXPORT CUresult cuEventDestroy_v2(CUevent e) {
	ENTER(cuEventDestroy_v2, 1);
	event *ev = lookup_event(e);
	if (ev == NULL)
		return leave(CUDA_ERROR_INVALID_HANDLE);
	ev->live = 0;
	return leave(CUDA_SUCCESS);
}

EXPORT CUresult cuStreamSynchronize(CUstream s) {
	ENTER(cuStreamSynchronize, 1);
	complete_stream((uint64_t)(uintptr_t)s, UINT64_MAX);
	return leave(CUDA_SUCCESS);
}

EXPORT CUresult cuCtxSynchronize(void) {
	ENTER(cuCtxSynchronize, 1);
	complete_all();
	return leave(CUDA_SUCCESS);
}

/* ---- cuMemAlloc / cuMemFree / cuMemGetInfo --------------------------- */

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size) {
	ENTER(cuMemAlloc_v2, 1);
	if (p == NULL || size == 0)
		return leave(CUDA_ERROR_INVALID_VALUE);
	if (size > capacity)
		return leave(CUDA_ERROR_OUT_OF_MEMORY);
	uint64_t phys = align_up(size, granularity);
	uint64_t align = size >= LARGE_ALIGN ? LARGE_ALIGN : SMALL_ALIGN;
	uint64_t extent = align_up(size, align);
	if (phys > capacity - used)
		return leave(CUDA_ERROR_OUT_OF_MEMORY);
	uint64_t addr = va_alloc(extent, align);
	if (addr == 0)
		return leave(CUDA_ERROR_OUT_OF_MEMORY);
	uint64_t hp = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t lo = addr / hp * hp, hi = align_up(addr + extent, hp);
	if (mprotect((void *)(uintptr_t)lo, hi - lo, PROT_READ | PROT_WRITE) != 0) {
		va_release(addr, extent);
		return leave(CUDA_ERROR_OUT_OF_MEMORY);
	}
	allocation a = {addr, extent, phys};
	if (PUSH(allocs, a) != 0) {
		va_release(addr, extent);
		return leave(CUDA_ERROR_OUT_OF_MEMORY);
	}
	used += phys;
	*p = addr;
	return leave(CUDA_SUCCESS);
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
	ENTER(cuMemFree_v2, 1);
	for (size_t i = 0; i < allocs.n; i++) {
		if (allocs.v[i].addr == p) {
			complete_all(); /* cudaFree synchronises the device */
			protect_none(p, allocs.v[i].extent);
			va_release(p, allocs.v[i].extent);
			used -= allocs.v[i].phys;
			DEL(allocs, i);
			return leave(CUDA_SUCCESS);
		}
	}
	return leave(CUDA_ERROR_INVALID_VALUE);
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) {
	ENTER(cuMemGetInfo_v2, 1);
	*free_ = capacity - used;
	*total = capacity;
	return leave(CUDA_SUCCESS);
}

/* ---- virtual memory management --------------------------------------- */

static int valid_prop(const CUmemAllocationProp *p) {
	return p != NULL && p->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
		p->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
		p->location.id >= 0 && p->location.id < device_count() &&
		p->win32HandleMetaData == NULL;
}

EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *p, int option) {
	ENTER(cuMemGetAllocationGranularity, 1);
	if (g == NULL || !valid_prop(p) || (option != 0 && option != 1))
		return leave(CUDA_ERROR_INVALID_VALUE);
	*g = granularity;
	return leave(CUDA_SUCCESS);
}

static int aligned_range(uint64_t addr, uint64_t size) {
	return size != 0 && size % granularity == 0 && addr % granularity == 0;
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t alignment, CUdeviceptr fixed, unsigned long long flags) {
	ENTER(cuMemAddressReserve, 1);
	if (p == NULL || size == 0 || size % granularity != 0 || fixed != 0 || flags != 0 ||
	    (alignment & (alignment - 1)) != 0)
		return leave(CUDA_ERROR_INVALID_VALUE);
	uint64_t align = granularity > LARGE_ALIGN ? granularity : LARGE_ALIGN;
	if (alignment > align)
		align = alignment;
	uint64_t addr = va_alloc(size, align);
	if (addr == 0)
		return leave(CUDA_ERROR_OUT_OF_MEMORY);
	span r = {addr, addr + size};
	if (PUSH(reservations, r) != 0) {
		va_release(addr, size);
		return leave(CUDA_ERROR_OUT_OF_MEMORY);
	}
	*p = addr;
	return leave(CUDA_SUCCESS);
}

/* mapped_in reports whether a page is mapped anywhere in [lo, hi). */
static int mapped_in(uint64_t lo, uint64_t hi) {
	for (size_t i = 0; i < mappings.n; i++) {
		mapping *m = &mappings.v[i];
		if (m->addr < hi && lo < m->addr + m->size)
			return 1;
	}
	return 0;
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t size) {
	ENTER(cuMemAddressFree, 1);
	for (size_t i = 0; i < reservations.n; i++) {
		span r = reservations.v[i];
		if (r.lo != p)
			continue;
		if (r.hi - r.lo != size || mapped_in(r.lo, r.hi))
			return leave(CUDA_ERROR_INVALID_VALUE);
		va_release(r.lo, size);
		DEL(reservations, i);
		return leave(CUDA_SUCCESS);
	}
	return leave(CUDA_ERROR_INVALID_VALUE);
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *p, unsigned long long flags) {
	ENTER(cuMemCreate, 1);
	if (h == NULL || !valid_prop(p) || flags != 0 || size == 0 || size % granularity != 0)
		return leave(CUDA_ERROR_INVALID_VALUE);
	if (size > capacity - used)
		return leave(CUDA_ERROR_OUT_OF_MEMORY);
	int fd = memfd_create("fakecuda-page", MFD_CLOEXEC);
	if (fd < 0)
		return leave(CUDA_ERROR_OUT_OF_MEMORY);
	if (ftruncate(fd, (off_t)size) != 0) {
		close(fd);
		return leave(CUDA_ERROR_OUT_OF_MEMORY);
	}
	page pg = {1, fd, 0, size};
	if (PUSH(pages, pg) != 0) {
		close(fd);
		return leave(CUDA_ERROR_OUT_OF_MEMORY);
	}
	used += size;
	*h = pages.n;
	return leave(CUDA_SUCCESS);
}

static page *lookup_page(CUmemGenericAllocationHandle h) {
	if (h == 0 || h > pages.n || !pages.v[h - 1].live)
		return NULL;
	return &pages.v[h - 1];
}

static int inside_reservation(uint64_t lo, uint64_t hi) {
	for (size_t i = 0; i < reservations.n; i++)
		if (reservations.v[i].lo <= lo && hi <= reservations.v[i].hi)
			return 1;
	return 0;
}

EXPORT CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags) {
	ENTER(cuMemMap, 1);
	page *pg = lookup_page(h);
	if (pg == NULL)
		return leave(CUDA_ERROR_INVALID_HANDLE);
	if (offset != 0 || flags != 0 || size != pg->size || !aligned_range(p, size) ||
	    !inside_reservation(p, p + size) || mapped_in(p, p + size))
		return leave(CUDA_ERROR_INVALID_VALUE);
	mapping mp = {p, size, h};
	if (PUSH(mappings, mp) != 0)
		return leave(CUDA_ERROR_OUT_OF_MEMORY);
	void *m = mmap((void *)(uintptr_t)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, pg->fd, 0);
	if (m == MAP_FAILED) {
		mappings.n--;
		return leave(CUDA_ERROR_OUT_OF_MEMORY);
	}
	pg->maps++;
	return leave(CUDA_SUCCESS);
}

/* covered reports whether every granule of [lo, hi) is mapped and, when
 * whole is set, no page's mapping sticks out of the range. */
static int covered(uint64_t lo, uint64_t hi, int whole) {
	for (uint64_t a = lo; a < hi; a += granularity) {
		int found = 0;
		for (size_t i = 0; i < mappings.n && !found; i++) {
			mapping *m = &mappings.v[i];
			if (m->addr <= a && a < m->addr + m->size) {
				if (whole && (m->addr < lo || m->addr + m->size > hi))
					return 0;
				found = 1;
			}
		}
		if (!found)
			return 0;
	}
	return 1;
}

EXPORT CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *d, size_t count) {
	ENTER(cuMemSetAccess, 1);
	if (d == NULL || count == 0 || !aligned_range(p, size) || !covered(p, p + size, 0))
		return leave(CUDA_ERROR_INVALID_VALUE);
	int prot = -1;
	for (size_t i = 0; i < count; i++) {
		if (d[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || d[i].location.id < 0 ||
		    d[i].location.id >= device_count())
			return leave(CUDA_ERROR_INVALID_VALUE);
		switch (d[i].flags) {
		case CU_MEM_ACCESS_FLAGS_PROT_NONE: prot = PROT_NONE; break;
		case CU_MEM_ACCESS_FLAGS_PROT_READ: prot = PROT_READ; break;
		case CU_MEM_ACCESS_FLAGS_PROT_READWRITE: prot = PROT_READ | PROT_WRITE; break;
		default: return leave(CUDA_ERROR_INVALID_VALUE);
		}
	}
	if (mprotect((void *)(uintptr_t)p, size, prot) != 0)
		return leave(CUDA_ERROR_UNKNOWN);
	return leave(CUDA_SUCCESS);
}

EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
	ENTER(cuMemUnmap, 1);
	if (!aligned_range(p, size) || !covered(p, p + size, 1))
		return leave(CUDA_ERROR_INVALID_VALUE);
	protect_none(p, size);
	for (size_t i = 0; i < mappings.n;) {
		mapping *m = &mappings.v[i];
		if (m->addr >= p && m->addr < p + size) {
			pages.v[m->page - 1].maps--;
			DEL(mappings, i);
			continue;
		}
		i++;
	}
	return leave(CUDA_SUCCESS);
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
	ENTER(cuMemRelease, 1);
	page *pg = lookup_page(h);
	if (pg == NULL)
		return leave(CUDA_ERROR_INVALID_HANDLE);
	if (pg->maps > 0)
		return leave(CUDA_ERROR_INVALID_VALUE);
	close(pg->fd);
	pg->live = 0;
	used -= pg->size;
	return leave(CUDA_SUCCESS);
}

/* ---- error names ----------------------------------------------------- */

static const struct { CUresult code; const char *name, *msg; } errs[] = {
	{0, "CUDA_SUCCESS", "no error"},
	{1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	{2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	{3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	{100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	{101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	{201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	{400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	{500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	{600, "CUDA_ERROR_NOT_READY", "device not ready"},
	{700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	{710, "CUDA_ERROR_ASSERT", "device-side assert triggered"},
	{714, "CUDA_ERROR_HARDWARE_STACK_ERROR", "hardware stack error"},
	{715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
	{716, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
	{717, "CUDA_ERROR_INVALID_ADDRESS_SPACE", "operation not supported on global/shared address space"},
	{718, "CUDA_ERROR_INVALID_PC", "invalid program counter"},
	{719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	{801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	{999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult error_text(CUresult c, const char **out, int msg) {
	for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
		if (errs[i].code == c) {
			*out = msg ? errs[i].msg : errs[i].name;
			return CUDA_SUCCESS;
		}
	}
	*out = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorName(CUresult c, const char **s) {
	ENTER(cuGetErrorName, 0);
	return leave(error_text(c, s, 0));
}

EXPORT CUresult cuGetErrorString(CUresult c, const char **s) {
	ENTER(cuGetErrorString, 0);
	return leave(error_text(c, s, 1));
}

/* ---- test controls --------------------------------------------------- */

EXPORT long long fakecuda_reset(const char *s, long long cap, long long gran, long long ctx) {
	(void)s;
	if (gran != 0 && (gran & (gran - 1)) != 0)
		return -1;
	pthread_mutex_lock(&mu);
	drop_all();
	capacity = cap > 0 ? (uint64_t)cap : 1ULL << 30;
	granularity = gran > 0 ? (uint64_t)gran : 2 * MIB;
	context_overhead = ctx > 0 ? (uint64_t)ctx : 0;
	primary.refs = 0;
	used = 0;
	sticky = sticky_pending = 0;
	sticky_after = 0;
	event_seq = 0;
	memset(counts, 0, sizeof counts);
	memset(fails, 0, sizeof fails);
	long long rc = 0;
	if (arena != 0 && capacity * 8 > arena_size)
		rc = -2; /* the arena was sized for a smaller device */
	pthread_mutex_unlock(&mu);
	return rc;
}

EXPORT long long fakecuda_fail(const char *fn, long long nth, long long code, long long c) {
	(void)c;
	int i = fn_index(fn);
	if (i < 0 || nth < 1)
		return -1;
	fault f = {i, nth, (CUresult)code};
	pthread_mutex_lock(&mu);
	int rc = PUSH(faults, f);
	pthread_mutex_unlock(&mu);
	return rc;
}

EXPORT long long fakecuda_sticky(const char *s, long long code, long long after, long long c) {
	(void)s;
	(void)c;
	pthread_mutex_lock(&mu);
	sticky_pending = (CUresult)code;
	sticky_after = after;
	pthread_mutex_unlock(&mu);
	return 0;
}

EXPORT long long fakecuda_count(const char *fn, long long failed, long long b, long long c) {
	(void)b;
	(void)c;
	int i = fn_index(fn);
	if (i < 0)
		return -1;
	pthread_mutex_lock(&mu);
	long long n = failed ? fails[i] : counts[i];
	pthread_mutex_unlock(&mu);
	return n;
}

EXPORT long long fakecuda_complete(const char *s, long long stream, long long all, long long c) {
	(void)s;
	(void)c;
	pthread_mutex_lock(&mu);
	if (all)
		complete_all();
	else
		complete_stream((uint64_t)stream, UINT64_MAX);
	pthread_mutex_unlock(&mu);
	return 0;
}

EXPORT long long fakecuda_stat(const char *name, long long a, long long b, long long c) {
	(void)a;
	(void)b;
	(void)c;
	long long v = -1;
	pthread_mutex_lock(&mu);
	if (strcmp(name, "used") == 0) {
		v = (long long)used;
	} else if (strcmp(name, "capacity") == 0) {
		v = (long long)capacity;
	} else if (strcmp(name, "arena") == 0) {
		v = (long long)arena;
	} else if (strcmp(name, "arena_size") == 0) {
		v = (long long)arena_size;
	} else if (strcmp(name, "pending") == 0 || strcmp(name, "live") == 0) {
		long long n = 0, live = 0;
		for (size_t i = 0; i < events.n; i++) {
			if (events.v[i].live) {
				live++;
				if (events.v[i].recorded && !events.v[i].done)
					n++;
			}
		}
		for (size_t i = 0; i < pages.n; i++)
			live += pages.v[i].live;
		live += (long long)(allocs.n + reservations.n);
		v = name[0] == 'p' ? n : live;
	}
	pthread_mutex_unlock(&mu);
	return v;
}

EXPORT long long fakecuda_clear_current(const char *s, long long a, long long b, long long c) {
	(void)s;
	(void)a;
	(void)b;
	(void)c;
	current = NULL;
	return 0;
}
