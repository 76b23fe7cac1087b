/*
 * harness.c: a C host for libmemreplay.so, built and run by the tests of
 * cmd/libmemreplay (lib_test.go). It dlopen()s the library, as PyTorch's
 * CUDAPluggableAllocator does through ctypes, and calls it only through
 * function pointers of the types PyTorch stores:
 *   std::function<void*(size_t, int, cudaStream_t)>          alloc_fn
 *   std::function<void(void*, size_t, int, cudaStream_t)>    free_fn
 *   void(int), void(), void(double, int), void(void*, cudaStream_t)  hooks
 *
 * Usage: harness LIB < script. Each script line is a command; each command
 * prints one line (the tests parse them):
 *   init N                     memreplay_init(N)                -> init
 *   malloc NAME SIZE DEV STRM  alloc_fn                         -> malloc NAME 0xPTR | malloc NAME NULL <last_error>
 *   touch NAME                 write a pattern over the whole block and read it back -> touch NAME ok|BAD
 *   free NAME                  free_fn with the malloc's size, device, stream -> free NAME
 *   freeaddr HEX               free_fn of an arbitrary pointer  -> freeaddr
 *   record NAME STRM           record_stream_fn                 -> record NAME
 *   complete STRM              the fake driver completes the stream's events -> complete
 *   empty                      reset_fn (empty_cache)           -> empty
 *   fraction F DEV             memory_fraction_fn               -> fraction
 *   stats DEV                  memreplay_stats_json             -> stats DEV {json} | stats DEV NULL <last_error>
 *   trace PATH | snapshot PATH memreplay_write_trace/_snapshot  -> trace RC | snapshot RC ("-" as PATH: NULL)
 *   lasterr                    memreplay_last_error             -> lasterr <message>
 *   threads T ITERS            T pthreads of random malloc/touch/free/record_stream -> threads ok N | threads BAD <why>
 *   bench N SIZE               N cached malloc+free pairs       -> bench N SIZE <ns per pair>
 *   benchnull N                N calls of free_fn(NULL): the bare C->Go->C call -> benchnull N <ns per call>
 *   benchmt T N SIZE           T threads of N pairs each        -> benchmt T N SIZE <ns per pair in a thread> <ns per pair overall>
 *   benchlibc N SIZE           N glibc malloc+free pairs, the baseline -> benchlibc N SIZE <ns per pair>
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct CUstream_st *cudaStream_t;

typedef void *(*alloc_fn_t)(size_t, int, cudaStream_t);
typedef void (*free_fn_t)(void *, size_t, int, cudaStream_t);
typedef void (*init_fn_t)(int);
typedef void (*reset_fn_t)(void);
typedef void (*fraction_fn_t)(double, int);
typedef void (*record_fn_t)(void *, cudaStream_t);
typedef char *(*stats_fn_t)(int);
typedef void (*free_string_fn_t)(char *);
typedef int (*write_fn_t)(const char *);
typedef const char *(*last_error_fn_t)(void);
typedef long long (*fake_hook_t)(const char *, long long, long long, long long);

static alloc_fn_t alloc_fn;
static free_fn_t free_fn;
static init_fn_t init_fn;
static reset_fn_t reset_fn;
static fraction_fn_t fraction_fn;
static record_fn_t record_fn;
static stats_fn_t stats_fn;
static free_string_fn_t free_string_fn;
static write_fn_t write_trace_fn, write_snapshot_fn;
static last_error_fn_t last_error_fn;

static void *sym(void *h, const char *name) {
	void *p = dlsym(h, name);
	if (p == NULL) {
		fprintf(stderr, "harness: %s: %s\n", name, dlerror());
		exit(2);
	}
	return p;
}

static double now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* ---- named blocks ------------------------------------------------------ */

#define MAXBLOCKS 4096
static struct block {
	char name[64];
	void *ptr;
	size_t size;
	int dev;
	cudaStream_t stream;
} blocks[MAXBLOCKS];
static int nblocks;

static struct block *find(const char *name) {
	for (int i = 0; i < nblocks; i++)
		if (strcmp(blocks[i].name, name) == 0)
			return &blocks[i];
	return NULL;
}

static struct block *named(const char *name) {
	struct block *b = find(name);
	if (b == NULL) {
		if (nblocks == MAXBLOCKS) {
			fprintf(stderr, "harness: too many blocks\n");
			exit(2);
		}
		b = &blocks[nblocks++];
		snprintf(b->name, sizeof b->name, "%s", name);
	}
	return b;
}

/* fill writes a pattern derived from seed over n bytes; check verifies it. */
static void fill(unsigned char *p, size_t n, uint64_t seed) {
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = seed ^ (i * 0x9E3779B97F4A7C15ULL);
		memcpy(p + i, &v, n - i < 8 ? n - i : 8);
	}
}

static int check(const unsigned char *p, size_t n, uint64_t seed) {
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = seed ^ (i * 0x9E3779B97F4A7C15ULL);
		if (memcmp(p + i, &v, n - i < 8 ? n - i : 8) != 0)
			return 0;
	}
	return 1;
}

/* ---- threads ------------------------------------------------------------ */

struct worker {
	int id, iters;
	long long served;
	char bad[256];
};

static void *work(void *arg) {
	struct worker *w = arg;
	static const size_t sizes[] = {1, 512, 4000, 65536, (1 << 20) - 1, (1 << 20) + 1, 3 << 20, 12 << 20};
	struct { void *p; size_t n; uint64_t seed; } live[16];
	int nlive = 0;
	uint64_t rng = 0x12345678ULL * (uint64_t)(w->id + 1);
	cudaStream_t stream = (cudaStream_t)(uintptr_t)(w->id % 3); /* streams 0, 1, 2 */
	for (int i = 0; i < w->iters; i++) {
		rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
		unsigned r = (unsigned)(rng >> 33);
		if (nlive < 16 && (r % 100 < 55 || nlive == 0)) {
			size_t n = sizes[(r >> 8) % (sizeof sizes / sizeof sizes[0])] + (r >> 16) % 512;
			void *p = alloc_fn(n, 0, stream);
			if (p == NULL) {
				snprintf(w->bad, sizeof w->bad, "malloc(%zu) failed: %s", n, last_error_fn());
				break;
			}
			/* Tag the first and the last 4 KiB with a per-block pattern: a
			 * block handed out twice, or unmapped, shows on its free. */
			uint64_t seed = rng ^ (uint64_t)(uintptr_t)p;
			size_t head = n < 4096 ? n : 4096;
			fill(p, head, seed);
			if (n >= 8192)
				fill((unsigned char *)p + n - 4096, 4096, ~seed);
			live[nlive].p = p;
			live[nlive].n = n;
			live[nlive].seed = seed;
			nlive++;
			w->served++;
		} else {
			int k = (int)((r >> 8) % (unsigned)nlive);
			void *p = live[k].p;
			size_t n = live[k].n, head = n < 4096 ? n : 4096;
			if (!check(p, head, live[k].seed) || (n >= 8192 && !check((unsigned char *)p + n - 4096, 4096, ~live[k].seed))) {
				snprintf(w->bad, sizeof w->bad, "block %p of %zu bytes was overwritten", p, n);
				break;
			}
			if (r % 7 == 0)
				record_fn(p, (cudaStream_t)(uintptr_t)7);
			free_fn(p, n, 0, stream);
			live[k] = live[--nlive];
		}
		if (w->id == 0 && i % 997 == 0)
			reset_fn();
		if (w->id == 1 && i % 501 == 0) {
			char *s = stats_fn(0);
			if (s == NULL) {
				snprintf(w->bad, sizeof w->bad, "stats failed: %s", last_error_fn());
				break;
			}
			free_string_fn(s);
		}
	}
	for (int k = 0; k < nlive; k++)
		free_fn(live[k].p, live[k].n, 0, stream);
	return NULL;
}

static void threads(int t, int iters) {
	pthread_t tid[64];
	struct worker w[64];
	if (t > 64)
		t = 64;
	for (int i = 0; i < t; i++) {
		memset(&w[i], 0, sizeof w[i]);
		w[i].id = i;
		w[i].iters = iters;
		pthread_create(&tid[i], NULL, work, &w[i]);
	}
	long long served = 0;
	const char *bad = NULL;
	for (int i = 0; i < t; i++) {
		pthread_join(tid[i], NULL);
		served += w[i].served;
		if (w[i].bad[0] && bad == NULL)
			bad = w[i].bad;
	}
	if (bad)
		printf("threads BAD %s\n", bad);
	else
		printf("threads ok %lld\n", served);
}

/* ---- benchmarks ------------------------------------------------------- */

struct benchjob {
	long n;
	size_t size;
	double ns;
};

static void *benchloop(void *arg) {
	struct benchjob *j = arg;
	cudaStream_t s = NULL;
	for (int i = 0; i < 1000; i++) /* warm: the segment exists, the thread has an M */
		free_fn(alloc_fn(j->size, 0, s), j->size, 0, s);
	double t0 = now_ns();
	for (long i = 0; i < j->n; i++) {
		void *p = alloc_fn(j->size, 0, s);
		free_fn(p, j->size, 0, s);
	}
	j->ns = now_ns() - t0;
	return NULL;
}

/* glibc's malloc and free through volatile pointers, so that the compiler
 * cannot pair them up and drop both. */
static void *(*volatile libc_malloc)(size_t) = malloc;
static void (*volatile libc_free)(void *) = free;

static double benchlibc(long n, size_t size) {
	for (int i = 0; i < 1000; i++)
		libc_free(libc_malloc(size));
	double t0 = now_ns();
	for (long i = 0; i < n; i++)
		libc_free(libc_malloc(size));
	return (now_ns() - t0) / (double)n;
}

/* ---- the interpreter ---------------------------------------------------- */

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: harness LIB < script\n");
		return 2;
	}
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		fprintf(stderr, "harness: %s\n", dlerror());
		return 2;
	}
	alloc_fn = (alloc_fn_t)sym(h, "memreplay_malloc");
	free_fn = (free_fn_t)sym(h, "memreplay_free");
	init_fn = (init_fn_t)sym(h, "memreplay_init");
	reset_fn = (reset_fn_t)sym(h, "memreplay_empty_cache");
	fraction_fn = (fraction_fn_t)sym(h, "memreplay_set_memory_fraction");
	record_fn = (record_fn_t)sym(h, "memreplay_record_stream");
	stats_fn = (stats_fn_t)sym(h, "memreplay_stats_json");
	free_string_fn = (free_string_fn_t)sym(h, "memreplay_free_string");
	write_trace_fn = (write_fn_t)sym(h, "memreplay_write_trace");
	write_snapshot_fn = (write_fn_t)sym(h, "memreplay_write_snapshot");
	last_error_fn = (last_error_fn_t)sym(h, "memreplay_last_error");

	char line[4096];
	setvbuf(stdout, NULL, _IOLBF, 0);
	while (fgets(line, sizeof line, stdin)) {
		line[strcspn(line, "\n")] = 0;
		char cmd[64] = "", a[1024] = "", b[64] = "", c[64] = "", d[64] = "";
		if (sscanf(line, "%63s %1023s %63s %63s %63s", cmd, a, b, c, d) < 1)
			continue;
		if (strcmp(cmd, "init") == 0) {
			init_fn(atoi(a));
			printf("init\n");
		} else if (strcmp(cmd, "malloc") == 0) {
			struct block *bl = named(a);
			bl->size = strtoull(b, NULL, 0);
			bl->dev = atoi(c);
			bl->stream = (cudaStream_t)(uintptr_t)strtoull(d, NULL, 0);
			bl->ptr = alloc_fn(bl->size, bl->dev, bl->stream);
			if (bl->ptr)
				printf("malloc %s %p\n", a, bl->ptr);
			else
				printf("malloc %s NULL %s\n", a, last_error_fn());
		} else if (strcmp(cmd, "touch") == 0) {
			struct block *bl = find(a);
			if (bl == NULL || bl->ptr == NULL) {
				printf("touch %s BAD no such block\n", a);
				continue;
			}
			fill(bl->ptr, bl->size, (uint64_t)(uintptr_t)bl->ptr);
			printf("touch %s %s\n", a, check(bl->ptr, bl->size, (uint64_t)(uintptr_t)bl->ptr) ? "ok" : "BAD");
		} else if (strcmp(cmd, "free") == 0) {
			struct block *bl = find(a);
			if (bl == NULL) {
				printf("free %s BAD no such block\n", a);
				continue;
			}
			free_fn(bl->ptr, bl->size, bl->dev, bl->stream);
			printf("free %s\n", a);
		} else if (strcmp(cmd, "freeaddr") == 0) {
			free_fn((void *)(uintptr_t)strtoull(a, NULL, 0), 512, 0, NULL);
			printf("freeaddr\n");
		} else if (strcmp(cmd, "record") == 0) {
			struct block *bl = find(a);
			record_fn(bl ? bl->ptr : NULL, (cudaStream_t)(uintptr_t)strtoull(b, NULL, 0));
			printf("record %s\n", a);
		} else if (strcmp(cmd, "complete") == 0) {
			const char *path = getenv("MEMREPLAY_LIBCUDA");
			void *fh = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
			fake_hook_t f = fh ? (fake_hook_t)dlsym(fh, "fakecuda_complete") : NULL;
			if (f == NULL) {
				printf("complete BAD the fake driver is not loaded\n");
				continue;
			}
			f("", (long long)strtoull(a, NULL, 0), 0, 0);
			printf("complete\n");
		} else if (strcmp(cmd, "empty") == 0) {
			reset_fn();
			printf("empty\n");
		} else if (strcmp(cmd, "fraction") == 0) {
			fraction_fn(strtod(a, NULL), atoi(b));
			printf("fraction\n");
		} else if (strcmp(cmd, "stats") == 0) {
			char *s = stats_fn(atoi(a));
			if (s) {
				printf("stats %s %s\n", a, s);
				free_string_fn(s);
			} else {
				printf("stats %s NULL %s\n", a, last_error_fn());
			}
		} else if (strcmp(cmd, "trace") == 0 || strcmp(cmd, "snapshot") == 0) {
			write_fn_t f = cmd[0] == 't' ? write_trace_fn : write_snapshot_fn;
			printf("%s %d\n", cmd, f(strcmp(a, "-") == 0 ? NULL : a));
		} else if (strcmp(cmd, "lasterr") == 0) {
			printf("lasterr %s\n", last_error_fn());
		} else if (strcmp(cmd, "threads") == 0) {
			threads(atoi(a), atoi(b));
		} else if (strcmp(cmd, "bench") == 0) {
			struct benchjob j = {atol(a), strtoull(b, NULL, 0), 0};
			benchloop(&j);
			printf("bench %ld %zu %.1f\n", j.n, j.size, j.ns / (double)j.n);
		} else if (strcmp(cmd, "benchlibc") == 0) {
			long n = atol(a);
			size_t size = strtoull(b, NULL, 0);
			printf("benchlibc %ld %zu %.1f\n", n, size, benchlibc(n, size));
		} else if (strcmp(cmd, "benchnull") == 0) {
			long n = atol(a);
			for (int i = 0; i < 1000; i++)
				free_fn(NULL, 0, 0, NULL);
			double t0 = now_ns();
			for (long i = 0; i < n; i++)
				free_fn(NULL, 0, 0, NULL);
			printf("benchnull %ld %.1f\n", n, (now_ns() - t0) / (double)n);
		} else if (strcmp(cmd, "benchmt") == 0) {
			int t = atoi(a);
			if (t > 64)
				t = 64;
			pthread_t tid[64];
			struct benchjob j[64];
			for (int i = 0; i < t; i++) {
				j[i] = (struct benchjob){atol(b), strtoull(c, NULL, 0), 0};
				pthread_create(&tid[i], NULL, benchloop, &j[i]);
			}
			double longest = 0, sum = 0;
			for (int i = 0; i < t; i++) {
				pthread_join(tid[i], NULL);
				sum += j[i].ns;
				if (j[i].ns > longest)
					longest = j[i].ns;
			}
			/* per pair in each thread, and the aggregate: the longest timed
			 * loop over all the pairs of all threads */
			printf("benchmt %d %ld %zu %.1f %.1f\n", t, j[0].n, j[0].size, sum / ((double)t * (double)j[0].n),
			       longest / ((double)t * (double)j[0].n));
		} else {
			printf("%s BAD unknown command\n", cmd);
		}
	}
	return 0;
}
