/*
 * cudadecl.h: the few CUDA driver API types this package needs, declared
 * here so that building needs no CUDA toolkit (see docs/cuda.md).
 *
 * The layouts and values follow NVIDIA's cuda.h (CUDA 12.x), as reproduced
 * in LLVM's offload plugin header offload/plugins-nextgen/cuda/dynamic_cuda/
 * cuda.h ("Error codes (as of CUDA 12.1)"; Apache-2.0 WITH LLVM-exception)
 * and in NVIDIA's driver API reference: CUmemAllocationProp_st,
 * CUmemLocation_st, CUmemAccessDesc_st, cudaError_enum, the enums below.
 * Only what is used is declared. The driver ABI is C and stable: a struct
 * or value here never changes meaning between driver versions, which is
 * why declaring them ourselves is safe.
 *
 * Shared by the cgo shim (shim.h) and the fake driver the tests build
 * (testdata/fakecuda.c), so both sides of the dlopen boundary agree; the
 * static asserts pin the sizes the real ABI has on LP64 Linux.
 */
#ifndef MEMREPLAY_CUDADECL_H
#define MEMREPLAY_CUDADECL_H

#include <stddef.h>

typedef int CUresult;                 /* enum cudaError_enum */
typedef int CUdevice;                 /* device ordinal handle */
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUmemGenericAllocationHandle;

/* cudaError_enum values used by name here. */
enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_ILLEGAL_ADDRESS = 700,
	CUDA_ERROR_ASSERT = 710,
	CUDA_ERROR_LAUNCH_FAILED = 719,
	CUDA_ERROR_NOT_SUPPORTED = 801,
	CUDA_ERROR_UNKNOWN = 999
};

/* CUdevice_attribute values. */
enum {
	CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102
};

/* CUevent_flags. */
enum { CU_EVENT_DISABLE_TIMING = 0x2 };

/* CUmemAllocationType, CUmemAllocationHandleType, CUmemLocationType,
 * CUmemAccess_flags, CUmemAllocationGranularity_flags. */
enum { CU_MEM_ALLOCATION_TYPE_PINNED = 0x1 };
enum { CU_MEM_HANDLE_TYPE_NONE = 0x0 };
enum { CU_MEM_LOCATION_TYPE_DEVICE = 0x1 };
enum {
	CU_MEM_ACCESS_FLAGS_PROT_NONE = 0x0,
	CU_MEM_ACCESS_FLAGS_PROT_READ = 0x1,
	CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3
};
enum { CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0 };

typedef struct CUmemLocation_st {
	int type; /* CUmemLocationType */
	int id;   /* device ordinal for CU_MEM_LOCATION_TYPE_DEVICE */
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
	int type;                 /* CUmemAllocationType */
	int requestedHandleTypes; /* CUmemAllocationHandleType */
	CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
	CUmemLocation location;
	int flags; /* CUmemAccess_flags */
} CUmemAccessDesc;

_Static_assert(sizeof(CUmemLocation) == 8, "CUmemLocation is 8 bytes");
_Static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp is 32 bytes on LP64");
_Static_assert(sizeof(CUmemAccessDesc) == 12, "CUmemAccessDesc is 12 bytes");

#endif
