/* The chaos run's C worker (chaos/run.py starts it; see chaos/workers/worker.py for the loop and
 * docs/reliability.md). Fenced writes through libpq, a connection of its own: accord's check
 * (accord_lease_fence_check_sql) and the UPDATE in one transaction. Configured by the
 * environment: CHAOS_URL, CHAOS_WRITER_URL, CHAOS_NAMESPACE, CHAOS_NAME, CHAOS_KEYS, CHAOS_TTL_MS. */
#define _POSIX_C_SOURCE 200809L
#include <accord.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MAX_KEYS 16

static double now(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static const char *env(const char *name) {
  const char *value = getenv(name);
  if (!value) { fprintf(stderr, "%s is not set\n", name); exit(2); }
  return value;
}

static void say_lease(const char *ev, const char *key, long long fence, const char *extra) {
  printf("{\"ev\": \"%s\", \"key\": \"%s\", \"fence\": %lld%s, \"t\": %.6f}\n", ev, key, fence,
         extra ? extra : "", now());
  fflush(stdout);
}

static void say_error(const char *op, accord_error *err) {
  /* The message goes to stderr: it may hold characters JSON would need escaped. */
  fprintf(stderr, "%s: %s\n", op, err ? accord_error_message(err) : "?");
  printf("{\"ev\": \"error\", \"op\": \"%s\", \"t\": %.6f}\n", op, now());
  fflush(stdout);
  accord_error_free(err);
}

static PGconn *db = NULL;

/* A statement that failed: 0 when the server refused the lease (check_fence's SQLSTATE, mapped
 * by accord_fenced_refusal to ACCORD_LEASE_LOST), else -1 (the connection is made again). */
static int refused_or_failed(PGresult *res) {
  accord_error *err = NULL;
  const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
  const char *message = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
  accord_status status = accord_fenced_refusal("check_fence", state ? state : "",
                                               message ? message : "", &err);
  accord_error_free(err);
  if (status == ACCORD_LEASE_LOST) return 0;
  fprintf(stderr, "write: %s", PQerrorMessage(db));
  return -1;
}

/* Runs `sql` with `params`; 1 when it did what `expected` says, else refused_or_failed's answer. */
static int run(const char *sql, int n, const char *const *params, ExecStatusType expected,
               PGresult **out) {
  PGresult *res = PQexecParams(db, sql, n, NULL, params, NULL, NULL, 0);
  int result = PQresultStatus(res) == expected ? 1 : refused_or_failed(res);
  if (out && result == 1) *out = res;
  else PQclear(res);
  return result;
}

/* The fenced write: accord's check (accord_lease_fence_check_sql) and the UPDATE in one
 * transaction. 1 accepted, 0 refused (by the check, or the row's fence was not smaller), -1
 * failed (reconnects next time). */
static int fenced_write(const char *url, const accord_lease *lease, const char *key,
                        const char *name) {
  if (db == NULL || PQstatus(db) != CONNECTION_OK) {
    if (db) PQfinish(db);
    db = PQconnectdb(url);
    if (PQstatus(db) != CONNECTION_OK) {
      fprintf(stderr, "writer connect: %s", PQerrorMessage(db));
      PQfinish(db);
      db = NULL;
      return -1;
    }
  }
  char *check = NULL, **check_params = NULL;
  uintptr_t n_check = 0;
  accord_error *err = NULL;
  accord_status status = accord_lease_fence_check_sql(lease, &check, &check_params, &n_check, &err);
  accord_error_free(err);
  if (status == ACCORD_LEASE_LOST) return 0; /* this client already knows: nothing is sent */
  if (status != ACCORD_OK) return -1;
  char fence_text[32];
  snprintf(fence_text, sizeof fence_text, "%lld", (long long)accord_lease_fence(lease));
  const char *params[3] = {fence_text, name, key};
  PGresult *updated = NULL;
  int result = run("BEGIN", 0, NULL, PGRES_COMMAND_OK, NULL);
  if (result == 1)
    result = run(check, (int)n_check, (const char *const *)check_params, PGRES_TUPLES_OK, NULL);
  if (result == 1)
    result = run("UPDATE chaos_resource SET fence = $1, writer = $2 WHERE key = $3 AND fence < $1",
                 3, params, PGRES_COMMAND_OK, &updated);
  if (result == 1) {
    result = strcmp(PQcmdTuples(updated), "1") == 0 ? 1 : 0;
    PQclear(updated);
    if (run("COMMIT", 0, NULL, PGRES_COMMAND_OK, NULL) != 1) result = -1;
  } else if (result == 0) {
    if (run("ROLLBACK", 0, NULL, PGRES_COMMAND_OK, NULL) != 1) result = -1;
  }
  accord_string_free(check);
  accord_string_array_free(check_params, n_check);
  if (result < 0) {
    PQfinish(db);
    db = NULL;
  }
  return result;
}

int main(void) {
  const char *url = env("CHAOS_URL"), *writer_url = env("CHAOS_WRITER_URL");
  const char *name = env("CHAOS_NAME");
  long ttl_ms = atol(env("CHAOS_TTL_MS"));
  char keys_buf[512];
  snprintf(keys_buf, sizeof keys_buf, "%s", env("CHAOS_KEYS"));
  char *keys[MAX_KEYS];
  int nkeys = 0;
  for (char *save = NULL, *k = strtok_r(keys_buf, ",", &save); k && nkeys < MAX_KEYS;
       k = strtok_r(NULL, ",", &save))
    keys[nkeys++] = k;
  srand((unsigned)time(NULL) ^ (unsigned)getpid());

  accord_error *err = NULL;
  accord_client_options *options = accord_client_options_new();
  accord_client_options_set_namespace(options, env("CHAOS_NAMESPACE"), NULL);
  accord_client_options_set_owner(options, name, NULL);
  accord_client_options_set_ttl_ms(options, (uint64_t)ttl_ms, NULL);
  accord_client *client = NULL;
  /* The server may be restarting or failing over when a worker starts. */
  while (accord_client_connect(url, options, &client, &err)) {
    say_error("connect", err);
    err = NULL;
    sleep_ms(500);
  }
  accord_client_options_free(options);
  printf("{\"ev\": \"start\", \"w\": \"%s\", \"t\": %.6f}\n", name, now());
  fflush(stdout);

  accord_acquire_options *acquire = accord_acquire_options_new();
  accord_acquire_options_set_ttl_ms(acquire, (uint64_t)ttl_ms, NULL);
  accord_acquire_options_set_timeout_ms(acquire, 3000, NULL);
  for (;;) {
    const char *key = keys[rand() % nkeys];
    accord_lease *lease = NULL;
    accord_status status = accord_client_acquire(client, key, acquire, &lease, &err);
    if (status == ACCORD_TIMEOUT) { accord_error_free(err); err = NULL; continue; }
    if (status) { say_error("acquire", err); err = NULL; sleep_ms(200); continue; }
    long long fence = (long long)accord_lease_fence(lease);
    say_lease("granted", key, fence, NULL);
    sleep_ms(20 + rand() % 130);
    int written = fenced_write(writer_url, lease, key, name);
    if (written < 0) say_lease("write_error", key, fence, NULL);
    else say_lease("write", key, fence, written ? ", \"accepted\": true" : ", \"accepted\": false");
    sleep_ms(10 + rand() % 40);
    /* No watcher thread here: lost is read when the lease ends. */
    int reported = accord_lease_is_lost(lease);
    if (reported) say_lease("lost", key, fence, ", \"how\": \"check\"");
    status = accord_lease_release(lease, &err);
    if (status == ACCORD_OK) say_lease("released", key, fence, NULL);
    else if (status == ACCORD_LEASE_LOST) {
      accord_error_free(err);
      if (!reported) say_lease("lost", key, fence, ", \"how\": \"release\"");
    } else say_error("release", err);
    err = NULL;
    accord_lease_free(lease);
  }
}
