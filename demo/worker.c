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

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int fail(const char *what, accord_error *err) {
  fprintf(stderr, "%s: %s\n", what, err ? accord_error_message(err) : "?");
  accord_error_free(err);
  exit(1);
}

/* Every BATCH completions, one worker (whoever gets the batch's key first) notifies. */
static void announce(accord_client *client, const char *name, char *announced) {
  accord_error *err = NULL;
  accord_list_query *query = accord_list_query_new();
  accord_list_query_set_prefix(query, "task/", NULL);
  accord_list_query_set_state(query, ACCORD_KEY_DONE, NULL);
  accord_list_query_set_limit(query, 1000, NULL);
  accord_list_page *page = NULL;
  if (accord_client_list(client, query, &page, &err)) fail("list", err);
  accord_list_query_free(query);
  uintptr_t done = 0;
  accord_list_page_items(page, &done);
  accord_list_page_free(page);
  for (uintptr_t batch = 1; batch <= done / BATCH && batch < MAX_TASKS; batch++) {
    if (announced[batch]) continue;
    char key[32], message[128];
    snprintf(key, sizeof key, "batch/%lu", (unsigned long)batch);
    accord_lease *lease = NULL;
    accord_status status = accord_client_try_acquire(client, key, NULL, &lease, &err);
    if (status == ACCORD_DONE) { accord_error_free(err); err = NULL; announced[batch] = 1; continue; }
    if (status == ACCORD_HELD) { accord_error_free(err); err = NULL; continue; }
    if (status) fail("try_acquire", err);
    snprintf(message, sizeof message, "batch %lu finished by %s", (unsigned long)batch, name);
    if (accord_client_notify(client, "demo", message, &err)) fail("notify", err);
    char result[128];
    snprintf(result, sizeof result, "{\"worker\": \"%s\"}", name);
    if (accord_lease_done(lease, result, &err)) fail("done", err);
    accord_lease_free(lease);
    printf("{\"ev\": \"notify\", \"worker\": \"%s\", \"batch\": %lu}\n", name, (unsigned long)batch);
    fflush(stdout);
    announced[batch] = 1;
  }
}

int main(int argc, char **argv) {
  if (argc != 5) { fprintf(stderr, "usage: worker_c URL NAMESPACE NAME TASKS\n"); return 2; }
  const char *url = argv[1], *namespace = argv[2], *name = argv[3];
  int tasks = atoi(argv[4]);
  if (tasks <= 0 || tasks > MAX_TASKS) { fprintf(stderr, "TASKS: 1..%d\n", MAX_TASKS); return 2; }
  srand((unsigned)time(NULL) ^ (unsigned)getpid());
  int *remaining = malloc(sizeof(int) * (size_t)tasks);
  int left = tasks;
  for (int i = 0; i < tasks; i++) remaining[i] = i;
  for (int i = tasks - 1; i > 0; i--) {
    int j = rand() % (i + 1), t = remaining[i];
    remaining[i] = remaining[j];
    remaining[j] = t;
  }
  char announced[MAX_TASKS] = {0};
  int completed = 0;

  accord_error *err = NULL;
  accord_client_options *options = accord_client_options_new();
  accord_client_options_set_namespace(options, namespace, NULL);
  accord_client_options_set_owner(options, name, NULL);
  accord_client_options_set_ttl_ms(options, TTL_MS, NULL);
  accord_client *client = NULL;
  if (accord_client_connect(url, options, &client, &err)) fail("connect", err);
  accord_client_options_free(options);
  accord_acquire_options *acquire = accord_acquire_options_new();
  accord_acquire_options_set_ttl_ms(acquire, TTL_MS, NULL);
  printf("{\"ev\": \"start\", \"worker\": \"%s\", \"lang\": \"c\"}\n", name);
  fflush(stdout);

  while (left > 0) {
    int progressed = 0;
    for (int i = 0; i < left;) {
      char key[32];
      snprintf(key, sizeof key, "task/%03d", remaining[i]);
      accord_lease *lease = NULL;
      accord_status status = accord_client_try_acquire(client, key, acquire, &lease, &err);
      if (status == ACCORD_HELD) { accord_error_free(err); err = NULL; i++; continue; }
      if (status == ACCORD_DONE) {
        accord_error_free(err); err = NULL;
        remaining[i] = remaining[--left]; /* finished by someone: drop it */
        continue;
      }
      if (status) fail("try_acquire", err);
      long long fence = (long long)accord_lease_fence(lease);
      printf("{\"ev\": \"acquired\", \"worker\": \"%s\", \"key\": \"%s\", \"fence\": %lld}\n", name, key, fence);
      fflush(stdout);
      sleep_ms(20 + rand() % 41); /* the "work" */
      char result[160];
      snprintf(result, sizeof result, "{\"worker\": \"%s\", \"lang\": \"c\", \"fence\": %lld}", name, fence);
      /* Fenced by the core: refused (ACCORD_LEASE_LOST) if the lease was lost meanwhile. */
      status = accord_lease_done(lease, result, &err);
      accord_lease_free(lease);
      if (status == ACCORD_LEASE_LOST) {
        accord_error_free(err); err = NULL;
        printf("{\"ev\": \"lost\", \"worker\": \"%s\", \"key\": \"%s\", \"fence\": %lld}\n", name, key, fence);
        fflush(stdout);
        i++;
        continue;
      }
      if (status) fail("done", err);
      printf("{\"ev\": \"done\", \"worker\": \"%s\", \"key\": \"%s\", \"fence\": %lld}\n", name, key, fence);
      fflush(stdout);
      remaining[i] = remaining[--left];
      completed++;
      progressed = 1;
      announce(client, name, announced);
    }
    if (left > 0 && !progressed) sleep_ms(100);
  }
  printf("{\"ev\": \"exit\", \"worker\": \"%s\", \"completed\": %d}\n", name, completed);
  fflush(stdout);
  accord_acquire_options_free(acquire);
  accord_client_close(client);
  accord_client_free(client);
  free(remaining);
  return 0;
}
