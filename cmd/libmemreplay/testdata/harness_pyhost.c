// harness_pyhost.c: a C program with no C++ runtime of its own that loads
// the C++ host (harness_cxx.cc built with -shared -DHARNESS_AS_LIBRARY)
// with RTLD_LOCAL and runs it, the way CPython imports torch: libstdc++
// comes into the process as a dependency of a locally loaded library, so
// dlsym(RTLD_DEFAULT, "__cxa_throw") finds nothing. lib_test.go checks
// that a failed malloc still throws there.
//
//   harness_pyhost HOST.so LIB SIZE   ->   what harness_cxx LIB SIZE prints
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
	if (argc != 4) {
		fprintf(stderr, "usage: harness_pyhost HOST.so LIB SIZE\n");
		return 2;
	}
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		fprintf(stderr, "harness_pyhost: %s\n", dlerror());
		return 2;
	}
	int (*run)(int, char **) = (int (*)(int, char **))dlsym(h, "harness_cxx_main");
	if (run == NULL) {
		fprintf(stderr, "harness_pyhost: %s\n", dlerror());
		return 2;
	}
	return run(argc - 1, argv + 1);
}
