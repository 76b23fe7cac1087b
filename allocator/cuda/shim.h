/*
 * shim.h: the C half of the driver binding, included once by lib_cgo.go.
 *
 * mr_open dlopens the driver and resolves every entry point into an
 * mr_lib table; mr_do runs one operation. Each operation is one cgo call
 * that first makes the device's primary context current on the calling
 * OS thread (cuCtxGetCurrent, and cuCtxSetCurrent only when another
 * context is current) and then makes the driver call. Doing both inside one
 * C function is what makes it safe for goroutines to move between threads:
 * a goroutine cannot be rescheduled in the middle of a C call, so the
 * context is always current on the thread that makes the call.
 *
 * Handles cross into Go as unsigned 64-bit integers and are turned back
 * into pointers here, so the Go side never forges unsafe.Pointers.
 *
 * Entry point names are the ones libcuda exports for the current ABI:
 * cuda.h #defines cuMemAlloc as cuMemAlloc_v2 and so on; dlsym sees only
 * the exported names.
 */
#ifndef MEMREPLAY_SHIM_H
#define MEMREPLAY_SHIM_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudadecl.h"

typedef struct mr_lib {
	void *handle;
	CUresult (*cuInit)(unsigned int);
	CUresult (*cuDriverGetVersion)(int *);
	CUresult (*cuDeviceGetCount)(int *);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDeviceGetName)(char *, int, CUdevice);
	CUresult (*cuDeviceTotalMem_v2)(size_t *, CUdevice);
	CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*cuDevicePrimaryCtxRelease_v2)(CUdevice);
	CUresult (*cuCtxGetCurrent)(CUcontext *);
	CUresult (*cuCtxSetCurrent)(CUcontext);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree_v2)(CUdeviceptr);
	CUresult (*cuMemGetInfo_v2)(size_t *, size_t *);
	CUresult (*cuMemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *, int);
	CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*cuMemAddressFree)(CUdeviceptr, size_t);
	CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
	CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
	CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
	CUresult (*cuEventCreate)(CUevent *, unsigned int);
	CUresult (*cuEventRecord)(CUevent, CUstream);
	CUresult (*cuEventQuery)(CUevent);
	CUresult (*cuEventSynchronize)(CUevent);
	CUresult (*cuEventDestroy_v2)(CUevent);
	CUresult (*cuStreamSynchronize)(CUstream);
	CUresult (*cuGetErrorName)(CUresult, const char **);
	CUresult (*cuGetErrorString)(CUresult, const char **);
} mr_lib;

static const struct {
	const char *name;
	size_t off;
} mr_symbols[] = {
#define MR_SYM(n) {#n, offsetof(mr_lib, n)}
	MR_SYM(cuInit), MR_SYM(cuDriverGetVersion), MR_SYM(cuDeviceGetCount),
	MR_SYM(cuDeviceGet), MR_SYM(cuDeviceGetName), MR_SYM(cuDeviceTotalMem_v2),
	MR_SYM(cuDeviceGetAttribute), MR_SYM(cuDevicePrimaryCtxRetain),
	MR_SYM(cuDevicePrimaryCtxRelease_v2), MR_SYM(cuCtxGetCurrent),
	MR_SYM(cuCtxSetCurrent), MR_SYM(cuCtxSynchronize), MR_SYM(cuMemAlloc_v2),
	MR_SYM(cuMemFree_v2), MR_SYM(cuMemGetInfo_v2),
	MR_SYM(cuMemGetAllocationGranularity), MR_SYM(cuMemAddressReserve),
	MR_SYM(cuMemAddressFree), MR_SYM(cuMemCreate), MR_SYM(cuMemMap),
	MR_SYM(cuMemSetAccess), MR_SYM(cuMemUnmap), MR_SYM(cuMemRelease),
	MR_SYM(cuEventCreate), MR_SYM(cuEventRecord), MR_SYM(cuEventQuery),
	MR_SYM(cuEventSynchronize), MR_SYM(cuEventDestroy_v2),
	MR_SYM(cuStreamSynchronize), MR_SYM(cuGetErrorName), MR_SYM(cuGetErrorString),
#undef MR_SYM
};

/* mr_open loads path and resolves every symbol. On failure it returns NULL
 * and writes why into err: dlopen's own message, or the missing symbol. */
static mr_lib *mr_open(const char *path, char *err, size_t errlen) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return NULL;
	}
	mr_lib *l = calloc(1, sizeof *l);
	if (l == NULL) {
		snprintf(err, errlen, "out of host memory");
		return NULL;
	}
	l->handle = h;
	for (size_t i = 0; i < sizeof mr_symbols / sizeof mr_symbols[0]; i++) {
		void *fn = dlsym(h, mr_symbols[i].name);
		if (fn == NULL) {
			snprintf(err, errlen, "symbol %s not found: the library is not a CUDA driver, or one older than 10.2", mr_symbols[i].name);
			free(l);
			/* No dlclose: a real libcuda must not be unloaded once loaded. */
			return NULL;
		}
		memcpy((char *)l + mr_symbols[i].off, &fn, sizeof fn);
	}
	return l;
}

/* Operations of mr_do; op* in ops.go must match. */
enum {
	MR_OP_INIT = 1,
	MR_OP_DRIVER_VERSION,
	MR_OP_DEVICE_COUNT,
	MR_OP_DEVICE_GET,
	MR_OP_TOTAL_MEM,
	MR_OP_ATTRIBUTE,
	MR_OP_PRIMARY_RETAIN,
	MR_OP_PRIMARY_RELEASE,
	/* the operations below need the context current */
	MR_OP_CTX_SYNC,
	MR_OP_MALLOC,
	MR_OP_FREE,
	MR_OP_MEMINFO,
	MR_OP_GRANULARITY,
	MR_OP_RESERVE,
	MR_OP_ADDRESS_FREE,
	MR_OP_CREATE,
	MR_OP_MAP,
	MR_OP_SET_ACCESS,
	MR_OP_UNMAP,
	MR_OP_RELEASE,
	MR_OP_EVENT_CREATE,
	MR_OP_EVENT_RECORD,
	MR_OP_EVENT_QUERY,
	MR_OP_EVENT_SYNC,
	MR_OP_EVENT_DESTROY,
	MR_OP_STREAM_SYNC,
	MR_OP_LAST
};

/* Which call of an operation failed. */
enum { MR_STEP_GET_CURRENT = 1, MR_STEP_SET_CURRENT = 2, MR_STEP_CALL = 3 };

typedef struct {
	CUresult rc;
	int step;
	unsigned long long a, b;
} mr_res;

/* mr_prop fills the allocation properties PyTorch's expandable segments
 * use: pinned device memory on one ordinal, no exportable handle. */
static void mr_prop(CUmemAllocationProp *p, int ordinal) {
	memset(p, 0, sizeof *p);
	p->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p->requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
	p->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p->location.id = ordinal;
}

/* mr_do runs op on ctx (0 for the operations before MR_OP_CTX_SYNC) with
 * arguments x, y, z; results come back in a and b. */
static mr_res mr_do(const mr_lib *l, uintptr_t ctx, int op,
		unsigned long long x, unsigned long long y, unsigned long long z) {
	mr_res r = {0, MR_STEP_CALL, 0, 0};
	if (op >= MR_OP_CTX_SYNC) {
		CUcontext cur = NULL;
		r.rc = l->cuCtxGetCurrent(&cur);
		if (r.rc != CUDA_SUCCESS) {
			r.step = MR_STEP_GET_CURRENT;
			return r;
		}
		if (cur != (CUcontext)ctx) {
			r.rc = l->cuCtxSetCurrent((CUcontext)ctx);
			if (r.rc != CUDA_SUCCESS) {
				r.step = MR_STEP_SET_CURRENT;
				return r;
			}
		}
	}
	switch (op) {
	case MR_OP_INIT:
		r.rc = l->cuInit(0);
		break;
	case MR_OP_DRIVER_VERSION: {
		int v = 0;
		r.rc = l->cuDriverGetVersion(&v);
		r.a = (unsigned long long)v;
		break;
	}
	case MR_OP_DEVICE_COUNT: {
		int n = 0;
		r.rc = l->cuDeviceGetCount(&n);
		r.a = (unsigned long long)n;
		break;
	}
	case MR_OP_DEVICE_GET: {
		CUdevice d = 0;
		r.rc = l->cuDeviceGet(&d, (int)x);
		r.a = (unsigned long long)d;
		break;
	}
	case MR_OP_TOTAL_MEM: {
		size_t n = 0;
		r.rc = l->cuDeviceTotalMem_v2(&n, (CUdevice)x);
		r.a = n;
		break;
	}
	case MR_OP_ATTRIBUTE: {
		int v = 0;
		r.rc = l->cuDeviceGetAttribute(&v, (int)y, (CUdevice)x);
		r.a = (unsigned long long)(long long)v;
		break;
	}
	case MR_OP_PRIMARY_RETAIN: {
		CUcontext c = NULL;
		r.rc = l->cuDevicePrimaryCtxRetain(&c, (CUdevice)x);
		r.a = (uintptr_t)c;
		break;
	}
	case MR_OP_PRIMARY_RELEASE:
		r.rc = l->cuDevicePrimaryCtxRelease_v2((CUdevice)x);
		break;
	case MR_OP_CTX_SYNC:
		r.rc = l->cuCtxSynchronize();
		break;
	case MR_OP_MALLOC: {
		CUdeviceptr p = 0;
		r.rc = l->cuMemAlloc_v2(&p, (size_t)x);
		r.a = p;
		break;
	}
	case MR_OP_FREE:
		r.rc = l->cuMemFree_v2((CUdeviceptr)x);
		break;
	case MR_OP_MEMINFO: {
		size_t f = 0, t = 0;
		r.rc = l->cuMemGetInfo_v2(&f, &t);
		r.a = f;
		r.b = t;
		break;
	}
	case MR_OP_GRANULARITY: {
		CUmemAllocationProp p;
		size_t g = 0;
		mr_prop(&p, (int)x);
		r.rc = l->cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
		r.a = g;
		break;
	}
	case MR_OP_RESERVE: {
		CUdeviceptr p = 0;
		r.rc = l->cuMemAddressReserve(&p, (size_t)x, (size_t)y, 0, 0);
		r.a = p;
		break;
	}
	case MR_OP_ADDRESS_FREE:
		r.rc = l->cuMemAddressFree((CUdeviceptr)x, (size_t)y);
		break;
	case MR_OP_CREATE: {
		CUmemAllocationProp p;
		CUmemGenericAllocationHandle h = 0;
		mr_prop(&p, (int)y);
		r.rc = l->cuMemCreate(&h, (size_t)x, &p, 0);
		r.a = h;
		break;
	}
	case MR_OP_MAP:
		r.rc = l->cuMemMap((CUdeviceptr)x, (size_t)y, 0, (CUmemGenericAllocationHandle)z, 0);
		break;
	case MR_OP_SET_ACCESS: {
		CUmemAccessDesc d;
		memset(&d, 0, sizeof d);
		d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		d.location.id = (int)z;
		d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		r.rc = l->cuMemSetAccess((CUdeviceptr)x, (size_t)y, &d, 1);
		break;
	}
	case MR_OP_UNMAP:
		r.rc = l->cuMemUnmap((CUdeviceptr)x, (size_t)y);
		break;
	case MR_OP_RELEASE:
		r.rc = l->cuMemRelease((CUmemGenericAllocationHandle)x);
		break;
	case MR_OP_EVENT_CREATE: {
		CUevent e = NULL;
		r.rc = l->cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
		r.a = (uintptr_t)e;
		break;
	}
	case MR_OP_EVENT_RECORD:
		r.rc = l->cuEventRecord((CUevent)(uintptr_t)x, (CUstream)(uintptr_t)y);
		break;
	case MR_OP_EVENT_QUERY:
		r.rc = l->cuEventQuery((CUevent)(uintptr_t)x);
		break;
	case MR_OP_EVENT_SYNC:
		r.rc = l->cuEventSynchronize((CUevent)(uintptr_t)x);
		break;
	case MR_OP_EVENT_DESTROY:
		r.rc = l->cuEventDestroy_v2((CUevent)(uintptr_t)x);
		break;
	case MR_OP_STREAM_SYNC:
		r.rc = l->cuStreamSynchronize((CUstream)(uintptr_t)x);
		break;
	default:
		r.rc = CUDA_ERROR_INVALID_VALUE;
	}
	return r;
}

/* mr_error_text looks up CUDA's name and description of rc. Either may be
 * NULL when the driver does not know the code. */
static void mr_error_text(const mr_lib *l, CUresult rc, const char **name, const char **msg) {
	*name = NULL;
	*msg = NULL;
	if (l->cuGetErrorName(rc, name) != CUDA_SUCCESS)
		*name = NULL;
	if (l->cuGetErrorString(rc, msg) != CUDA_SUCCESS)
		*msg = NULL;
}

/* mr_device_name is cuDeviceGetName into buf. */
static CUresult mr_device_name(const mr_lib *l, int dev, char *buf, int len) {
	return l->cuDeviceGetName(buf, len, (CUdevice)dev);
}

/* mr_hook calls a function the library exports beyond the driver API, with
 * the signature long long f(const char *, long long, long long, long long).
 * Only the fake driver has such functions (its test controls); returns
 * CUDA_ERROR_NOT_FOUND in *rc when the symbol is missing. */
static long long mr_hook(const mr_lib *l, const char *fn, const char *s,
		long long a, long long b, long long c, CUresult *rc) {
	long long (*f)(const char *, long long, long long, long long);
	void *p = dlsym(l->handle, fn);
	if (p == NULL) {
		*rc = CUDA_ERROR_NOT_FOUND;
		return 0;
	}
	memcpy(&f, &p, sizeof f);
	*rc = CUDA_SUCCESS;
	return f(s, a, b, c);
}

/* mr_repeat runs n operations without leaving C, for the benchmark that
 * separates the cost of the cgo transition from the driver's: with size 0
 * n cuMemGetInfo_v2, otherwise n cuMemAlloc_v2 + cuMemFree_v2 pairs of
 * size bytes, each through mr_do as a Go call would. */
static CUresult mr_repeat(const mr_lib *l, uintptr_t ctx, long long n, unsigned long long size) {
	for (long long i = 0; i < n; i++) {
		if (size == 0) {
			mr_res r = mr_do(l, ctx, MR_OP_MEMINFO, 0, 0, 0);
			if (r.rc != CUDA_SUCCESS)
				return r.rc;
			continue;
		}
		mr_res r = mr_do(l, ctx, MR_OP_MALLOC, size, 0, 0);
		if (r.rc != CUDA_SUCCESS)
			return r.rc;
		r = mr_do(l, ctx, MR_OP_FREE, r.a, 0, 0);
		if (r.rc != CUDA_SUCCESS)
			return r.rc;
	}
	return CUDA_SUCCESS;
}

#endif
