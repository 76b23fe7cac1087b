// harness_cxx.cc: a C++ host for libmemreplay.so that holds the allocator
// exactly as PyTorch's CUDAPluggableAllocator does, in std::function objects
// made from the dlsym'ed addresses (torch._C._cuda_customAllocator does
// reinterpret_cast<MallocFuncType*>(ptr) into std::function), and calls it
// the way CUDAPluggableAllocator::malloc does, with no check of the result.
// Built with the system C++ compiler by lib_test.go; it checks what a
// failed malloc does in a C++ process:
//
//   harness_cxx LIB SIZE   ->  "ok PTR" then "freed", or
//                              "threw <what()>" (the exception propagated
//                              through std::function and was caught as
//                              std::exception, as PyTorch's Python bindings
//                              catch it), or "null" (no exception, NULL),
//                              then "after PTR" (the library still serves a
//                              small malloc after the failure) or "after
//                              threw <what()>"
//
// Built with -shared -DHARNESS_AS_LIBRARY it is instead a library whose
// harness_cxx_main a C program (harness_pyhost.c) loads with RTLD_LOCAL,
// as CPython loads torch's extension modules: the C++ runtime is then in
// the process but not in its global scope.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>

typedef struct CUstream_st *cudaStream_t;
using MallocFuncType = void *(size_t, int, cudaStream_t);
using FreeFuncType = void(void *, size_t, int, cudaStream_t);

#ifdef HARNESS_AS_LIBRARY
extern "C" int harness_cxx_main(int argc, char **argv) {
#else
int main(int argc, char **argv) {
#endif
	if (argc != 3) {
		std::fprintf(stderr, "usage: harness_cxx LIB SIZE\n");
		return 2;
	}
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (h == nullptr) {
		std::fprintf(stderr, "harness_cxx: %s\n", dlerror());
		return 2;
	}
	std::function<MallocFuncType> alloc_fn = reinterpret_cast<MallocFuncType *>(dlsym(h, "memreplay_malloc"));
	std::function<FreeFuncType> free_fn = reinterpret_cast<FreeFuncType *>(dlsym(h, "memreplay_free"));
	size_t size = std::strtoull(argv[2], nullptr, 0);
	try {
		void *p = alloc_fn(size, 0, nullptr);
		if (p == nullptr) {
			std::printf("null\n");
		} else {
			std::printf("ok %p\n", p);
			free_fn(p, size, 0, nullptr);
			std::printf("freed\n");
		}
	} catch (const std::exception &e) {
		std::printf("threw %s\n", e.what());
	}
	try {
		void *q = alloc_fn(4096, 0, nullptr);
		std::printf("after %p\n", q);
		if (q != nullptr)
			free_fn(q, 4096, 0, nullptr);
	} catch (const std::exception &e) {
		std::printf("after threw %s\n", e.what());
	}
	return 0;
}
