//go:build cgo

/*
 * shim.c: the exported C functions of libmemreplay.so, with PyTorch's
 * signatures (memreplay.h), over the Go functions of exports.go.
 *
 * Pointers and streams cross into Go as uintptr_t and come back as
 * integers that become pointers here, so the Go side never manufactures an
 * unsafe.Pointer from a device address (go vet's rule).
 *
 * Throwing on a failed malloc. PyTorch's CUDAPluggableAllocator::malloc
 * does not check the pointer its alloc_fn returns: a NULL becomes the data
 * pointer of a tensor, and the first kernel that touches it fails with an
 * illegal memory access, which is sticky and ends the process. PyTorch's
 * own allocator throws instead (c10::OutOfMemoryError, caught by Python as
 * an exception). So when a malloc fails, memreplay_malloc throws a
 * std::runtime_error carrying the message, which PyTorch's Python bindings
 * turn into a RuntimeError ("CUDA out of memory. Tried to allocate ...").
 * This file is C: it throws through the C++ ABI, with the C++ runtime's
 * own entry points looked up at run time (__cxa_allocate_exception,
 * std::runtime_error's constructor, destructor and type_info,
 * __cxa_throw), in the global scope or else in the libstdc++.so.6 the
 * process has loaded (cxx_resolve). A process without the C++ runtime
 * loaded (a C program) gets NULL instead, and so does any process with MEMREPLAY_OOM=null. The
 * exception is thrown after the Go call has returned, from this C frame:
 * no Go frame is ever unwound. -fexceptions (exports.go) gives this frame
 * the unwind tables the C++ unwinder walks.
 */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "freequeue.h"
#include "memreplay.h"
#include "_cgo_export.h"

#define MR_ERRLEN 4096

/* The buffer memreplay_last_error returns, one per thread, allocated at the
 * thread's first call and freed when the thread exits. It is a pthread key
 * rather than a __thread array because the Go runtime's initial-exec TLS
 * puts this library's whole TLS block in the static TLS surplus that
 * dlopen() can use, which is only a few KiB ("cannot allocate memory in
 * static TLS block"). */
static pthread_key_t mr_last_err_key;
static pthread_once_t mr_key_once = PTHREAD_ONCE_INIT;

static void mr_key_create(void) { pthread_key_create(&mr_last_err_key, free); }

/* ---- throwing std::runtime_error from C ------------------------------ */

static struct {
	void *(*alloc)(size_t);
	void (*ctor)(void *, const char *);
	void (*dtor)(void *);
	void *tinfo;
	void (*thr)(void *, void *, void (*)(void *));
	int ok;
} cxx;
static pthread_once_t cxx_once = PTHREAD_ONCE_INIT;

static void cxx_lookup(void *from) {
	/* The Itanium C++ ABI names, as libstdc++ exports them:
	 * std::runtime_error::runtime_error(const char *) (GCC 5 and later),
	 * std::runtime_error::~runtime_error(), typeinfo for
	 * std::runtime_error. */
	*(void **)&cxx.alloc = dlsym(from, "__cxa_allocate_exception");
	*(void **)&cxx.ctor = dlsym(from, "_ZNSt13runtime_errorC1EPKc");
	*(void **)&cxx.dtor = dlsym(from, "_ZNSt13runtime_errorD1Ev");
	cxx.tinfo = dlsym(from, "_ZTISt13runtime_error");
	*(void **)&cxx.thr = dlsym(from, "__cxa_throw");
	cxx.ok = cxx.alloc && cxx.ctor && cxx.dtor && cxx.tinfo && cxx.thr;
}

/* cxx_resolve finds the C++ runtime the process already has. A C++
 * program has it in the global scope. CPython does not: it imports torch's
 * extension modules with RTLD_LOCAL, so libstdc++ is in the process only
 * as their dependency, invisible to RTLD_DEFAULT (on a real GPU the
 * library then returned NULL and PyTorch made a tensor of it). RTLD_NOLOAD
 * finds that same copy by its soname and never loads a new one, so the
 * exception's type is the one PyTorch's handlers match. */
static void cxx_resolve(void) {
	cxx_lookup(RTLD_DEFAULT);
	if (cxx.ok)
		return;
	void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);
	if (h != NULL)
		cxx_lookup(h); /* the reference is kept: the library is never unloaded while h lives */
}

/* mr_throw throws std::runtime_error(msg) if the C++ runtime is loaded,
 * and returns otherwise. It frees msg (malloc'd by the Go side) either way:
 * the exception keeps its own copy. */
static void mr_throw(char *msg) {
	pthread_once(&cxx_once, cxx_resolve);
	if (!cxx.ok) {
		free(msg);
		return;
	}
	/* sizeof(std::runtime_error) is 16 on LP64 libstdc++ (vtable pointer
	 * and a reference-counted string); 64 leaves room to spare. */
	void *e = cxx.alloc(64);
	cxx.ctor(e, msg);
	free(msg);
	cxx.thr(e, cxx.tinfo, cxx.dtor);
}

/* ---- PyTorch's alloc_fn and free_fn ----------------------------------- */

void *memreplay_malloc(size_t size, int device, cudaStream_t stream) {
	GoUintptr p = 0;
	char *throw = NULL;
	mrgo_malloc((GoUint64)size, (GoInt32)device, (GoUintptr)(uintptr_t)stream, &p, &throw);
	if (throw != NULL) /* failed, and the caller may want an exception */
		mr_throw(throw);
	return (void *)(uintptr_t)p;
}

/* The ring of deferred frees (freequeue.h, freequeue.go): set by Go when
 * the library is built, unless it records. Hidden: not part of the ABI. */
__attribute__((visibility("hidden"))) struct mr_fq *mr_fq_live;

/* mr_pending_frees is the number of frees queued and not yet applied, for
 * the tests (testdata/harness.c). It is not part of the ABI. */
long long mr_pending_frees(void) {
	struct mr_fq *q = __atomic_load_n(&mr_fq_live, __ATOMIC_ACQUIRE);
	if (q == NULL)
		return 0;
	uint64_t done = __atomic_load_n(&q->done, __ATOMIC_ACQUIRE);
	return (long long)(__atomic_load_n(&q->tail, __ATOMIC_ACQUIRE) - done);
}

/* memreplay_free queues the pointer for the next call into Go, from any
 * thread, to apply before anything else; it enters Go itself when there is
 * no queue, the queue is full, or a live block has a use on another stream
 * (mr_fq_defer). Freeing NULL does nothing. The size and stream are not
 * needed: the pointer names the block. The device (the one PyTorch
 * recorded at the malloc) says which device's table to look in first; a
 * wrong one costs a search of the others. */
void memreplay_free(void *ptr, size_t size, int device, cudaStream_t stream) {
	(void)size;
	(void)stream;
	if (ptr == NULL)
		return;
	struct mr_fq *q = __atomic_load_n(&mr_fq_live, __ATOMIC_ACQUIRE);
	if (q != NULL && mr_fq_defer(q, (uint64_t)(uintptr_t)ptr, device))
		return;
	mrgo_free((GoUintptr)(uintptr_t)ptr, (GoInt32)device);
}

/* ---- hooks ------------------------------------------------------------ */

void memreplay_init(int device_count) { mrgo_init((GoInt32)device_count); }

void memreplay_empty_cache(void) { mrgo_empty_cache(); }

void memreplay_set_memory_fraction(double fraction, int device) {
	mrgo_set_memory_fraction(fraction, (GoInt32)device);
}

void memreplay_record_stream(void *ptr, cudaStream_t stream) {
	mrgo_record_stream((GoUintptr)(uintptr_t)ptr, (GoUintptr)(uintptr_t)stream);
}

/* ---- introspection ---------------------------------------------------- */

char *memreplay_stats_json(int device) { return mrgo_stats_json((GoInt32)device); }

void memreplay_free_string(char *s) { free(s); }

int memreplay_write_trace(const char *path) { return mrgo_write_trace((char *)path); }

int memreplay_write_snapshot(const char *path) { return mrgo_write_snapshot((char *)path); }

const char *memreplay_last_error(void) {
	pthread_once(&mr_key_once, mr_key_create);
	char *b = pthread_getspecific(mr_last_err_key);
	if (b == NULL) {
		b = calloc(1, MR_ERRLEN);
		if (b == NULL || pthread_setspecific(mr_last_err_key, b) != 0) {
			free(b);
			return "memreplay: no memory for the message";
		}
	}
	mrgo_last_error(b, MR_ERRLEN);
	return b;
}
