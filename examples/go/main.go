// accord from Go: take a lease, work under it, mark it done; send and receive a notification.
//
//	ACCORD_URL=postgres://user:password@localhost/db go run .
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	accord "github.com/accord/accord/bindings/go"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := os.Getenv("ACCORD_URL")
	if url == "" {
		url = "postgres://localhost/postgres"
	}
	client, err := accord.Connect(ctx, url, &accord.ClientOptions{Namespace: "quickstart"})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	// Wait up to 5 s for the key; the lease renews itself in the background.
	lease, err := client.Acquire(ctx, "report/2026-11-22", &accord.AcquireOptions{Timeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Printf("holding %s with fence %d\n", lease.Key(), lease.Fence())
	select {
	case <-lease.Lost():
		log.Fatal("lost the lease: stop writing")
	case <-time.After(100 * time.Millisecond): // ... work, passing lease.Fence() to what you write ...
	}
	if err := lease.Done(ctx, map[string]any{"rows": 42}); err != nil {
		log.Fatal(err)
	}

	// Notifications, from any client or from SQL (NOTIFY jobs, 'hi').
	sub, err := client.Listen(ctx, "jobs")
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	if err := client.Notify(ctx, "jobs", "report ready"); err != nil {
		log.Fatal(err)
	}
	event := <-sub.Events()
	fmt.Printf("%s: %s\n", event.Channel, event.Payload)

	// Start over next time: the key stays done until reset.
	if _, err := client.Reset(ctx, "report/2026-11-22"); err != nil {
		log.Fatal(err)
	}
}
