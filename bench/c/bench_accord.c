/*
 * accord's C bench (make bench-c): the uncontended workload of bench/README.md through
 * libaccord's C ABI. One client (schema accord_bench, pool size 1), one key, a loop of
 * try_acquire + release; writes the JSON of the contract to $ACCORD_BENCH_OUT.
 *
 *   ACCORD_BENCH_URL=postgres://… ACCORD_BENCH_OUT=c.json target/bench/bench_accord_c
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accord.h"

#define BENCH_ID "c/accord"
#define BENCH_KEY "bench-" BENCH_ID
#define BENCH_LABEL "accord, C (libaccord)"

#if defined(__clang__)
#define CC_VERSION "clang " __clang_version__
#elif defined(__GNUC__)
#define CC_VERSION "gcc " __VERSION__
#else
#define CC_VERSION "unknown"
#endif

static void die(const char *what, accord_status status, accord_error *err) {
    fprintf(stderr, "bench-c: %s failed (status %d): %s\n", what, (int)status,
            err != NULL ? accord_error_message(err) : "");
    accord_error_free(err);
    exit(1);
}

static void check(const char *what, accord_status status, accord_error *err) {
    if (status != ACCORD_OK) {
        die(what, status, err);
    }
}

/* A non-negative integer from the environment, or `fallback` when unset or empty. */
static long env_count(const char *name, long fallback) {
    const char *s = getenv(name);
    if (s == NULL || *s == '\0') {
        return fallback;
    }
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 0) {
        fprintf(stderr, "bench-c: %s=%s is not a non-negative integer\n", name, s);
        exit(2);
    }
    return v;
}

static double now_us(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
        perror("bench-c: clock_gettime");
        exit(1);
    }
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* One try_acquire + release pair: the key must be free. */
static void pair(const accord_client *client) {
    accord_lease *lease = NULL;
    accord_error *err = NULL;
    accord_status st = accord_client_try_acquire(client, BENCH_KEY, NULL, &lease, &err);
    if (st != ACCORD_OK || lease == NULL) {
        die("try_acquire(" BENCH_KEY ") (the key must be free)", st, err);
    }
    st = accord_lease_release(lease, &err);
    if (st != ACCORD_OK) {
        accord_lease_free(lease);
        die("release", st, err);
    }
    accord_lease_free(lease);
}

/* Runs `count` pairs, storing each one's latency (µs) from `out` on (when not NULL). */
static void run(const accord_client *client, long count, double *out) {
    for (long i = 0; i < count; i++) {
        double t0 = now_us();
        pair(client);
        if (out != NULL) {
            out[i] = now_us() - t0;
        }
    }
}

/* Prints the libaccord shared object this process mapped (nothing when linked statically): the
 * bench's proof of which build it measured. */
static void print_loaded_library(void) {
    FILE *maps = fopen("/proc/self/maps", "r");
    if (maps == NULL) {
        return;
    }
    char line[4096];
    while (fgets(line, sizeof line, maps) != NULL) {
        char *path = strchr(line, '/');
        if (path != NULL && strstr(path, "libaccord") != NULL) {
            fprintf(stderr, "bench-c: libaccord loaded from %s", path);
            break;
        }
    }
    fclose(maps);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void) {
    const char *url = getenv("ACCORD_BENCH_URL");
    if (url == NULL || *url == '\0') {
        fprintf(stderr, "bench-c: ACCORD_BENCH_URL is not set\n");
        return 2;
    }
    const char *out_path = getenv("ACCORD_BENCH_OUT");
    long pairs = env_count("ACCORD_BENCH_PAIRS", 5000);
    long warmup = env_count("ACCORD_BENCH_WARMUP", 500);
    if (pairs < 1) {
        fprintf(stderr, "bench-c: ACCORD_BENCH_PAIRS must be at least 1\n");
        return 2;
    }

    accord_error *err = NULL;
    accord_client_options *options = accord_client_options_new();
    check("set_schema", accord_client_options_set_schema(options, "accord_bench", &err), err);
    check("set_pool_size", accord_client_options_set_pool_size(options, 1, &err), err);
    check("set_application_name",
          accord_client_options_set_application_name(options, "accord-bench-c", &err), err);
    accord_client *client = NULL;
    double connect_start = now_us();
    check("connect", accord_client_connect(url, options, &client, &err), err);
    double connect_ms = (now_us() - connect_start) / 1e3;
    accord_client_options_free(options);

    double *lat = malloc((size_t)pairs * sizeof *lat);
    if (lat == NULL) {
        fprintf(stderr, "bench-c: out of memory\n");
        return 1;
    }

    run(client, warmup, NULL);
    /* The measured pairs in two halves (one contender here: A, A). */
    long first = pairs / 2;
    double start = now_us();
    run(client, first, lat);
    run(client, pairs - first, lat + first);
    double seconds = (now_us() - start) / 1e6;

    accord_client_close(client);
    accord_client_free(client);
    accord_shutdown();

    FILE *out = stdout;
    if (out_path != NULL && *out_path != '\0') {
        out = fopen(out_path, "w");
        if (out == NULL) {
            fprintf(stderr, "bench-c: cannot write %s: %s\n", out_path, strerror(errno));
            return 1;
        }
    }
    fprintf(out,
            "{\n  \"source\": \"c\",\n"
            "  \"versions\": {\"libaccord\": \"%s\", \"cc\": \"%s\"},\n"
            "  \"results\": [\n    {\n"
            "      \"id\": \"%s\",\n      \"label\": \"%s\",\n"
            "      \"ops\": %ld,\n      \"seconds\": %.6f,\n      \"latencies_us\": [",
            accord_version(), CC_VERSION, BENCH_ID, BENCH_LABEL, pairs, seconds);
    for (long i = 0; i < pairs; i++) {
        fprintf(out, "%s%.3f", i == 0 ? "" : ", ", lat[i]);
    }
    fprintf(out,
            "],\n      \"metrics\": {\"warmup_pairs\": %ld, \"pool_size\": 1, \"connect_ms\": %.3f}\n"
            "    }\n  ]\n}\n",
            warmup, connect_ms);
    if (out != stdout ? fclose(out) != 0 : fflush(out) != 0) {
        fprintf(stderr, "bench-c: writing the results failed: %s\n", strerror(errno));
        return 1;
    }

    print_loaded_library();
    qsort(lat, (size_t)pairs, sizeof *lat, cmp_double);
    fprintf(stderr, "bench-c: %s: %ld pairs in %.3f s (%.0f pairs/s), p50 %.1f us, p99 %.1f us\n",
            BENCH_ID, pairs, seconds, (double)pairs / seconds, lat[pairs / 2],
            lat[(size_t)((double)(pairs - 1) * 0.99)]);
    free(lat);
    return 0;
}
