/* accord from C: take a lease, work under it, mark it done; send and receive a notification.
 *
 *   cc examples/c/quickstart.c -o quickstart $(pkg-config --cflags --libs accord) \
 *     -Wl,-rpath,"$(pkg-config --variable=libdir accord)"
 *   ACCORD_URL=postgres://user:password@localhost/db ./quickstart
 *
 * The rpath records where libaccord.so.0 is, for a prefix the dynamic loader does not search
 * (README.md, "C quick start"). Runs again and again: the key it marks done is reset at the end.
 */
#include <accord.h>
#include <stdio.h>
#include <stdlib.h>

static int fail(const char *what, accord_error *err) {
  fprintf(stderr, "%s: %s\n", what, accord_error_message(err));
  accord_error_free(err);
  return 1;
}

int main(void) {
  const char *url = getenv("ACCORD_URL");
  accord_error *err = NULL;
  accord_client_options *options = accord_client_options_new();
  accord_client_options_set_namespace(options, "quickstart", NULL);

  accord_client *client = NULL;
  if (accord_client_connect(url ? url : "postgres://localhost/postgres", options, &client, &err))
    return fail("connect", err);
  accord_client_options_free(options);

  /* Wait up to 5 s for the key; the lease renews itself in the background. */
  accord_acquire_options *acquire = accord_acquire_options_new();
  accord_acquire_options_set_timeout_ms(acquire, 5000, NULL);
  accord_lease *lease = NULL;
  if (accord_client_acquire(client, "report/2026-11-22", acquire, &lease, &err))
    return fail("acquire", err);
  accord_acquire_options_free(acquire);
  printf("holding %s with fence %lld\n", accord_lease_key(lease),
         (long long)accord_lease_fence(lease));
  /* ... work, passing the fence to whatever you write; check accord_lease_is_lost() ... */
  if (accord_lease_done(lease, "{\"rows\": 42}", &err)) return fail("done", err);
  accord_lease_free(lease);

  /* Notifications, from any client or from SQL (NOTIFY jobs, 'hi'). */
  const char *channels[] = {"jobs"};
  accord_subscription *subscription = NULL;
  if (accord_client_listen(client, channels, 1, &subscription, &err)) return fail("listen", err);
  if (accord_client_notify(client, "jobs", "report ready", &err)) return fail("notify", err);
  accord_event *event = NULL;
  if (accord_subscription_next(subscription, 5000, &event, &err)) return fail("next", err);
  printf("%s: %s\n", event->channel, event->payload);
  accord_event_free(event);
  accord_subscription_free(subscription);

  /* Start over next time: the key stays done until reset. */
  accord_client_reset(client, "report/2026-11-22", NULL, NULL);
  accord_client_close(client);
  accord_client_free(client);
  return 0;
}
