package accord

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// O1: accord behind a real PgBouncer (scripts/with-postgres.sh starts one in front of the test
// database). Transaction pooling carries commands but not LISTEN: Listen there fails naming
// listen_url, and with ListenURL naming the server directly a client hears again.

// bouncer is the URL of the PgBouncer pool of this mode. The test cluster of `make test` always
// has one: there, a missing one fails the test rather than skipping it.
func bouncer(t *testing.T, mode string) string {
	t.Helper()
	url := os.Getenv("ACCORD_TEST_PGBOUNCER_" + mode + "_URL")
	if url == "" {
		if os.Getenv("ACCORD_TEST_PGDATA") != "" {
			t.Fatal("the test cluster has no PgBouncer: install it (apt-get install pgbouncer)")
		}
		t.Skipf("no PgBouncer (ACCORD_TEST_PGBOUNCER_%s_URL is not set)", mode)
	}
	return url
}

// connectAt connects a client of ns to url, its listening connection to listenURL ("": url).
func connectAt(t *testing.T, url, listenURL, ns, owner string) *Client {
	t.Helper()
	c, err := Connect(context.Background(), url, &ClientOptions{
		Namespace: ns, Owner: owner, ApplicationName: ns + ":" + owner, ListenURL: listenURL,
	})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestListenURLBehindTransactionPooling(t *testing.T) { // O1
	ctx := context.Background()
	pooler := bouncer(t, "TRANSACTION")
	ns := namespace(t)
	ch := fmt.Sprintf("ch_%d", os.Getpid())
	// PgBouncer before 1.21 leaves every statement prepared through this pool on its one
	// server connection, and the names (s1, s2, …) start over in every process: what an
	// earlier process left there ("prepared statement s8 already exists") is cleared first.
	psqlAt(t, pooler, "DEALLOCATE ALL")
	deaf := connectAt(t, pooler, "", ns, "deaf")
	if sub, err := deaf.Listen(ctx, ch); !errors.Is(err, ErrConnection) || !strings.Contains(err.Error(), "listen_url") {
		t.Fatalf("listen through transaction pooling: %v %v", sub, err)
	}
	// Commands through the pooler, LISTEN straight to the server.
	listener := connectAt(t, pooler, databaseURL(t), ns, "listener")
	sender := connectAt(t, pooler, "", ns, "sender")
	sub := must(listener.Listen(ctx, ch))
	defer sub.Close()
	if err := sender.Notify(ctx, ch, "through the pooler"); err != nil {
		t.Fatal(err)
	}
	if e := next(t, sub); e != (Event{Message, ch, "through the pooler"}) {
		t.Fatalf("got %+v", e)
	}
}

func TestListenURLRefusedOnTheEmbeddedStore(t *testing.T) {
	ctx := context.Background()
	_, err := Connect(ctx, "memory:go-listen-url", &ClientOptions{ListenURL: "postgres://localhost/x"})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "listen_url") {
		t.Fatalf("listen_url on memory: %v", err)
	}
	// A C string would end at a NUL: refused rather than cut short, as every string option.
	_, err = Connect(ctx, "memory:go-listen-url", &ClientOptions{ListenURL: "postgres://localhost/x\x00y"})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "listen_url") {
		t.Fatalf("listen_url with a NUL: %v", err)
	}
}
