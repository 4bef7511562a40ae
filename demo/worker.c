/* The demo's C worker: worker_c URL NAMESPACE NAME TASKS (see demo/README.md). */
#define _POSIX_C_SOURCE 200809L
#include <accord.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TTL_MS 2000
#define BATCH 50
#define MAX_TASKS 1000
#define CLAIM_BATCH 2     /* tasks per claim */
#define CLAIM_WAIT_MS 500 /* how long an empty claim waits for a release or an expiry */

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int fail(const char *what, accord_error *err) {
  fprintf(stderr, "%s: %s\n", what, err ? accord_error_message(err) : "?");
  accord_error_free(err);
  exit(1);
}

/* Every BATCH completions, one worker notifies: the announcements are a work pool too. Whoever
 * sees a batch complete offers its key to the pool `batch/` (idempotent: others may offer it
 * too); whoever claims it announces it and marks it done, so each is announced once. A worker
 * killed holding one loses it at its ttl, and the next claim takes it. Returns the batches
 * offered so far. */
static uint64_t announce(accord_client *client, const char *name, uint64_t offered) {
  accord_error *err = NULL;
  accord_pool_counts counts;
  if (accord_client_counts(client, "task/", &counts, &err)) fail("counts", err);
  uint64_t ready = counts.done / BATCH;
  if (ready > offered) {
    char names[MAX_TASKS / BATCH][32];
    const char *keys[MAX_TASKS / BATCH];
    size_t n = 0;
    for (uint64_t b = offered + 1; b <= ready && n < MAX_TASKS / BATCH; b++, n++) {
      snprintf(names[n], sizeof names[n], "batch/%llu", (unsigned long long)b);
      keys[n] = names[n];
    }
    if (accord_client_offer(client, "batch/", keys, n, NULL, NULL, &err)) fail("offer", err);
  }
  if (ready == 0) return ready;
  accord_claim_options *claim = accord_claim_options_new();
  accord_claim_options_set_limit(claim, (int64_t)ready, NULL);
  accord_claim_options_set_ttl_ms(claim, TTL_MS, NULL);
  accord_lease **leases = NULL;
  size_t n = 0;
  if (accord_client_claim(client, "batch/", claim, &leases, &n, &err)) fail("claim", err);
  accord_claim_options_free(claim);
  for (size_t i = 0; i < n; i++) {
    unsigned long batch = strtoul(accord_lease_key(leases[i]) + strlen("batch/"), NULL, 10);
    char message[128], result[128];
    snprintf(message, sizeof message, "batch %lu finished by %s", batch, name);
    if (accord_client_notify(client, "demo", message, &err)) fail("notify", err);
    snprintf(result, sizeof result, "{\"worker\": \"%s\"}", name);
    if (accord_lease_done(leases[i], result, &err)) fail("done", err);
    printf("{\"ev\": \"notify\", \"worker\": \"%s\", \"batch\": %lu}\n", name, batch);
    fflush(stdout);
    accord_lease_free(leases[i]);
  }
  accord_lease_array_free(leases, n);
  return ready;
}

int main(int argc, char **argv) {
  if (argc != 5) { fprintf(stderr, "usage: worker_c URL NAMESPACE NAME TASKS\n"); return 2; }
  const char *url = argv[1], *namespace = argv[2], *name = argv[3];
  int tasks = atoi(argv[4]);
  if (tasks <= 0 || tasks > MAX_TASKS) { fprintf(stderr, "TASKS: 1..%d\n", MAX_TASKS); return 2; }
  srand((unsigned)time(NULL) ^ (unsigned)getpid());
  uint64_t offered = 0; /* batches this worker offered so far */
  int completed = 0;

  accord_error *err = NULL;
  accord_client_options *options = accord_client_options_new();
  accord_client_options_set_namespace(options, namespace, NULL);
  accord_client_options_set_owner(options, name, NULL);
  accord_client_options_set_ttl_ms(options, TTL_MS, NULL);
  accord_client *client = NULL;
  if (accord_client_connect(url, options, &client, &err)) fail("connect", err);
  accord_client_options_free(options);
  printf("{\"ev\": \"start\", \"worker\": \"%s\", \"lang\": \"c\"}\n", name);
  fflush(stdout);

  /* Every worker offers the whole task list: offers are idempotent, the first one adds them. */
  char (*names)[32] = malloc(sizeof *names * (size_t)tasks);
  const char **keys = malloc(sizeof *keys * (size_t)tasks);
  for (int i = 0; i < tasks; i++) {
    snprintf(names[i], sizeof names[i], "task/%03d", i);
    keys[i] = names[i];
  }
  if (accord_client_offer(client, "task/", keys, (size_t)tasks, NULL, NULL, &err)) fail("offer", err);
  free(keys);
  free(names);

  /* A few tasks per claim; an empty claim waits a little for a release or an expiry. */
  accord_claim_options *claim = accord_claim_options_new();
  accord_claim_options_set_limit(claim, CLAIM_BATCH, NULL);
  accord_claim_options_set_ttl_ms(claim, TTL_MS, NULL);
  accord_claim_options_set_timeout_ms(claim, CLAIM_WAIT_MS, NULL);
  for (;;) {
    accord_lease **leases = NULL;
    size_t n = 0;
    if (accord_client_claim(client, "task/", claim, &leases, &n, &err)) fail("claim", err);
    if (n == 0) {
      /* Nothing claimable: finished once nothing is free or held (a killed worker's task is
       * held until its ttl runs out, then free). */
      accord_pool_counts counts;
      if (accord_client_counts(client, "task/", &counts, &err)) fail("counts", err);
      if (counts.free == 0 && counts.held == 0) break;
      continue;
    }
    for (size_t i = 0; i < n; i++) {
      accord_lease *lease = leases[i];
      const char *key = accord_lease_key(lease);
      long long fence = (long long)accord_lease_fence(lease);
      printf("{\"ev\": \"acquired\", \"worker\": \"%s\", \"key\": \"%s\", \"fence\": %lld}\n", name, key, fence);
      fflush(stdout);
      sleep_ms(20 + rand() % 41); /* the "work" */
      char result[160];
      snprintf(result, sizeof result, "{\"worker\": \"%s\", \"lang\": \"c\", \"fence\": %lld}", name, fence);
      /* Fenced by the core: refused (ACCORD_LEASE_LOST) if the lease was lost meanwhile. */
      accord_status status = accord_lease_done(lease, result, &err);
      if (status == ACCORD_LEASE_LOST) {
        accord_error_free(err); err = NULL;
        printf("{\"ev\": \"lost\", \"worker\": \"%s\", \"key\": \"%s\", \"fence\": %lld}\n", name, key, fence);
        fflush(stdout);
        continue;
      }
      if (status) fail("done", err);
      printf("{\"ev\": \"done\", \"worker\": \"%s\", \"key\": \"%s\", \"fence\": %lld}\n", name, key, fence);
      fflush(stdout);
      completed++;
      offered = announce(client, name, offered);
    }
    for (size_t i = 0; i < n; i++) accord_lease_free(leases[i]);
    accord_lease_array_free(leases, n);
  }
  printf("{\"ev\": \"exit\", \"worker\": \"%s\", \"completed\": %d}\n", name, completed);
  fflush(stdout);
  accord_claim_options_free(claim);
  accord_client_close(client);
  accord_client_free(client);
  return 0;
}
