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
 *   freeas NAME DEV            free_fn with DEV as the device argument (a wrong one) -> freeas NAME
 *   pending                    the frees queued and not yet applied (mr_pending_frees; no call into Go) -> pending N
 *   churn N SIZE               N mallocs of SIZE, then their N frees -> churn N <most frees pending after a free> <pending at the end>
 *   ordercheck ITERS           3 threads: one on device 1 alone frees p and mallocs the same size, ITERS times,
 *                              and must get p back each time; one on device 0 only frees (blocks the main
 *                              thread allocated); one on device 0 mallocs and frees -> ordercheck ok | ordercheck BAD <why>
 *   record NAME STRM           record_stream_fn                 -> record NAME
 *   complete STRM              the fake driver completes the stream's events -> complete
 *   empty                      reset_fn (empty_cache)           -> empty
 *   fraction F DEV             memory_fraction_fn               -> fraction
 *   stats DEV                  memreplay_stats_json             -> stats DEV {json} | stats DEV NULL <last_error>
 *   trace PATH | snapshot PATH memreplay_write_trace/_snapshot  -> trace RC | snapshot RC ("-" as PATH: NULL)
 *   lasterr                    memreplay_last_error             -> lasterr <message>
 *   threads T ITERS            T pthreads of random malloc/touch/free/record_stream -> threads ok N | threads BAD <why>
 *   bench N SIZE               N cached malloc+free pairs       -> bench N SIZE <ns per pair> <cpu ns per pair>
 *   benchcall N                N calls of init_fn(1): a bare C->Go->C call -> benchcall N <ns per call> <cpu ns per call>
 *   benchmt T N SIZE           T threads of N pairs each        -> benchmt T N SIZE <ns per pair in a thread> <ns per pair overall> <cpu ns per pair>
 *                              (SIZE 0: T threads of N bare calls, as benchcall, so that the
 *                              crossing's own cost across threads shows apart from the device's lock)
 *   benchlibc N SIZE           N glibc malloc+free pairs, the baseline -> benchlibc N SIZE <ns per pair> <cpu ns per pair>
 * The benchmarks time their loop with the monotonic clock (wall time) and
 * with the calling thread's CPU clock, which does not count the time the
 * thread waited for a CPU: the steadier figure on a loaded machine.
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
typedef long long (*pending_fn_t)(void);

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
static pending_fn_t pending_fn;

static void *sym(void *h, const char *name) {
	void *p = dlsym(h, name);
	if (p == NULL) {
		fprintf(stderr, "harness: %s: %s\n", name, dlerror());
		exit(2);
	}
	return p;
}

static double clock_ns(clockid_t c) {
	struct timespec ts;
	clock_gettime(c, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }
static double cpu_ns(void) { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

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

/* ---- deferred frees ------------------------------------------------------ */

/* churn mallocs n blocks, then frees them, watching how many frees wait in
 * the queue: never more than its size, and none once a call has drained
 * it. */
static void churn(long n, size_t size) {
	void **ps = calloc((size_t)n, sizeof *ps);
	if (ps == NULL) {
		printf("churn BAD no memory\n");
		return;
	}
	for (long i = 0; i < n; i++) {
		ps[i] = alloc_fn(size, 0, NULL);
		if (ps[i] == NULL) {
			printf("churn BAD malloc %ld: %s\n", i, last_error_fn());
			free(ps);
			return;
		}
	}
	long long most = 0;
	for (long i = 0; i < n; i++) {
		free_fn(ps[i], size, 0, NULL);
		long long k = pending_fn();
		if (k > most)
			most = k;
	}
	free(ps);
	printf("churn %ld %lld %lld\n", n, most, pending_fn());
}

#define ORDER_FREES 3000
struct orderjob {
	int role; /* 0: device 1's order check, 1: frees only, 2: mallocs and frees */
	int iters;
	void **tofree; /* role 1 */
	char bad[256];
};

static void *orderwork(void *arg) {
	struct orderjob *j = arg;
	switch (j->role) {
	case 0: /* device 1 is this thread's alone: once p is freed, its
		 * segment is all free, and a malloc of the same size must
		 * split it from the start again, at p */
		for (int i = 0; i < j->iters; i++) {
			void *p = alloc_fn(1000, 1, NULL);
			free_fn(p, 1000, 1, NULL);
			void *q = alloc_fn(1000, 1, NULL);
			if (p == NULL || q != p) {
				snprintf(j->bad, sizeof j->bad, "iteration %d: freed %p, then malloc gave %p", i, p, q);
				return NULL;
			}
			free_fn(q, 1000, 1, NULL);
		}
		break;
	case 1: /* never mallocs: its frees wait for other threads' calls */
		for (int i = 0; i < ORDER_FREES; i++)
			free_fn(j->tofree[i], 4096, 0, NULL);
		break;
	case 2:
		for (int i = 0; i < j->iters; i++) {
			size_t n = 512 + (size_t)(i % 7) * 1000;
			void *p = alloc_fn(n, 0, NULL);
			if (p == NULL) {
				snprintf(j->bad, sizeof j->bad, "malloc(%zu) failed: %s", n, last_error_fn());
				return NULL;
			}
			free_fn(p, n, 0, NULL);
		}
		break;
	}
	return NULL;
}

static void ordercheck(int iters) {
	static void *tofree[ORDER_FREES];
	for (int i = 0; i < ORDER_FREES; i++) {
		tofree[i] = alloc_fn(4096, 0, NULL);
		if (tofree[i] == NULL) {
			printf("ordercheck BAD malloc: %s\n", last_error_fn());
			return;
		}
	}
	pthread_t tid[3];
	struct orderjob j[3];
	for (int i = 0; i < 3; i++) {
		memset(&j[i], 0, sizeof j[i]);
		j[i].role = i;
		j[i].iters = iters;
		j[i].tofree = tofree;
		pthread_create(&tid[i], NULL, orderwork, &j[i]);
	}
	const char *bad = NULL;
	for (int i = 0; i < 3; i++) {
		pthread_join(tid[i], NULL);
		if (j[i].bad[0] && bad == NULL)
			bad = j[i].bad;
	}
	if (bad)
		printf("ordercheck BAD %s\n", bad);
	else
		printf("ordercheck ok\n");
}

/* ---- benchmarks ------------------------------------------------------- */

struct benchjob {
	long n;
	size_t size;
	double ns, cpu; /* the loop's wall and CPU time */
};

static void *benchloop(void *arg) {
	struct benchjob *j = arg;
	cudaStream_t s = NULL;
	if (j->size == 0) {
		for (int i = 0; i < 1000; i++)
			init_fn(1);
		double t0 = now_ns(), c0 = cpu_ns();
		for (long i = 0; i < j->n; i++)
			init_fn(1);
		j->cpu = cpu_ns() - c0;
		j->ns = now_ns() - t0;
		return NULL;
	}
	for (int i = 0; i < 1000; i++) /* warm: the segment exists, the thread has an M */
		free_fn(alloc_fn(j->size, 0, s), j->size, 0, s);
	double t0 = now_ns(), c0 = cpu_ns();
	for (long i = 0; i < j->n; i++) {
		void *p = alloc_fn(j->size, 0, s);
		free_fn(p, j->size, 0, s);
	}
	j->cpu = cpu_ns() - c0;
	j->ns = now_ns() - t0;
	return NULL;
}

/* glibc's malloc and free through volatile pointers, so that the compiler
 * cannot pair them up and drop both. */
static void *(*volatile libc_malloc)(size_t) = malloc;
static void (*volatile libc_free)(void *) = free;

static void benchlibc(struct benchjob *j) {
	for (int i = 0; i < 1000; i++)
		libc_free(libc_malloc(j->size));
	double t0 = now_ns(), c0 = cpu_ns();
	for (long i = 0; i < j->n; i++)
		libc_free(libc_malloc(j->size));
	j->cpu = cpu_ns() - c0;
	j->ns = now_ns() - t0;
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
	pending_fn = (pending_fn_t)dlsym(h, "mr_pending_frees"); /* optional: not in libraries before deferred frees */

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
		} else if (strcmp(cmd, "freeas") == 0) {
			struct block *bl = find(a);
			if (bl == NULL) {
				printf("freeas %s BAD no such block\n", a);
				continue;
			}
			free_fn(bl->ptr, bl->size, atoi(b), bl->stream);
			printf("freeas %s\n", a);
		} else if (pending_fn == NULL && (strcmp(cmd, "pending") == 0 || strcmp(cmd, "churn") == 0)) {
			printf("%s BAD the library has no mr_pending_frees\n", cmd);
		} else if (strcmp(cmd, "pending") == 0) {
			printf("pending %lld\n", pending_fn());
		} else if (strcmp(cmd, "churn") == 0) {
			churn(atol(a), strtoull(b, NULL, 0));
		} else if (strcmp(cmd, "ordercheck") == 0) {
			ordercheck(atoi(a));
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
			struct benchjob j = {atol(a), strtoull(b, NULL, 0), 0, 0};
			benchloop(&j);
			printf("bench %ld %zu %.1f %.1f\n", j.n, j.size, j.ns / (double)j.n, j.cpu / (double)j.n);
		} else if (strcmp(cmd, "benchlibc") == 0) {
			struct benchjob j = {atol(a), strtoull(b, NULL, 0), 0, 0};
			benchlibc(&j);
			printf("benchlibc %ld %zu %.1f %.1f\n", j.n, j.size, j.ns / (double)j.n, j.cpu / (double)j.n);
		} else if (strcmp(cmd, "benchcall") == 0) {
			/* init_fn does next to nothing in Go (free_fn(NULL) no longer
			 * enters Go at all) */
			long n = atol(a);
			for (int i = 0; i < 1000; i++)
				init_fn(1);
			double t0 = now_ns(), c0 = cpu_ns();
			for (long i = 0; i < n; i++)
				init_fn(1);
			double cpu = cpu_ns() - c0;
			printf("benchcall %ld %.1f %.1f\n", n, (now_ns() - t0) / (double)n, cpu / (double)n);
		} else if (strcmp(cmd, "benchmt") == 0) {
			int t = atoi(a);
			if (t > 64)
				t = 64;
			pthread_t tid[64];
			struct benchjob j[64];
			for (int i = 0; i < t; i++) {
				j[i] = (struct benchjob){atol(b), strtoull(c, NULL, 0), 0, 0};
				pthread_create(&tid[i], NULL, benchloop, &j[i]);
			}
			double longest = 0, sum = 0, cpu = 0;
			for (int i = 0; i < t; i++) {
				pthread_join(tid[i], NULL);
				sum += j[i].ns;
				cpu += j[i].cpu;
				if (j[i].ns > longest)
					longest = j[i].ns;
			}
			/* per pair in each thread, the aggregate (the longest timed
			 * loop over all the pairs of all threads), and the threads'
			 * CPU time over all the pairs */
			double pairs = (double)t * (double)j[0].n;
			printf("benchmt %d %ld %zu %.1f %.1f %.1f\n", t, j[0].n, j[0].size, sum / pairs, longest / pairs, cpu / pairs);
		} else {
			printf("%s BAD unknown command\n", cmd);
		}
	}
	return 0;
}
