package accord

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// O1: accord behind a real PgBouncer (scripts/with-postgres.sh starts one in front of the test
// database). Transaction pooling carries commands but not LISTEN: Listen there fails naming
// listen_url, and with ListenURL naming the server directly a client hears again. Clients there
// send their statements unprepared (DisablePreparedStatements).

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

// connectAt connects a client of ns to the transaction pool at url, in schema, with its
// statements unprepared (PgBouncer before 1.21 cannot carry prepared ones in this mode), its
// listening connection to listenURL ("": url).
func connectAt(t *testing.T, url, schema, listenURL, ns, owner string) *Client {
	t.Helper()
	c, err := Connect(context.Background(), url, &ClientOptions{
		Namespace: ns, Owner: owner, ApplicationName: ns + ":" + owner, Schema: schema,
		ListenURL: listenURL, DisablePreparedStatements: true,
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
	// A schema of this test's own: accord's statements name it, so that any of them left
	// prepared on the pool's server connection can be told from others'. Dropped last, after
	// the clients' cleanups.
	schema := fmt.Sprintf("go_o1_%d", time.Now().UnixNano())
	t.Cleanup(func() { psql(t, "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	deaf := connectAt(t, pooler, schema, "", ns, "deaf")
	if sub, err := deaf.Listen(ctx, ch); !errors.Is(err, ErrConnection) || !strings.Contains(err.Error(), "listen_url") {
		t.Fatalf("listen through transaction pooling: %v %v", sub, err)
	}
	// Commands through the pooler, LISTEN straight to the server.
	listener := connectAt(t, pooler, schema, databaseURL(t), ns, "listener")
	sender := connectAt(t, pooler, schema, "", ns, "sender")
	sub := must(listener.Listen(ctx, ch))
	defer sub.Close()
	if err := sender.Notify(ctx, ch, "through the pooler"); err != nil {
		t.Fatal(err)
	}
	if e := next(t, sub); e != (Event{Message, ch, "through the pooler"}) {
		t.Fatalf("got %+v", e)
	}
	// DisablePreparedStatements reached the core: while the clients are open, nothing of their
	// schema is prepared on the pool's one server connection (a session through the pool sees
	// what every client left there).
	left := psqlAt(t, pooler, "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%"+schema+"%'")
	if left != "0" {
		t.Fatalf("%s statements of schema %s left prepared on the pool's server connection", left, schema)
	}
}

func TestListenURLRefusedOnTheEmbeddedStore(t *testing.T) {
	ctx := context.Background()
	_, err := Connect(ctx, "memory:go-listen-url", &ClientOptions{ListenURL: "postgres://localhost/x"})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "ListenURL") {
		t.Fatalf("listen_url on memory: %v", err)
	}
	// A C string would end at a NUL: refused rather than cut short, as every string option.
	_, err = Connect(ctx, "memory:go-listen-url", &ClientOptions{ListenURL: "postgres://localhost/x\x00y"})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "ListenURL") {
		t.Fatalf("listen_url with a NUL: %v", err)
	}
}
