// The demo's Go worker: go run . URL NAMESPACE NAME TASKS (see demo/README.md).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"time"

	accord "github.com/accord/accord/bindings/go"
)

const (
	ttl        = 2 * time.Second        // a killed worker's task is free again after at most this long
	batch      = 50                     // one notification every this many completions
	claimBatch = 2                      // tasks per claim
	claimWait  = 500 * time.Millisecond // how long an empty claim waits for a release or an expiry
)

func say(event map[string]any) {
	line, _ := json.Marshal(event)
	fmt.Println(string(line))
}

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: worker URL NAMESPACE NAME TASKS")
		os.Exit(2)
	}
	url, namespace, name := os.Args[1], os.Args[2], os.Args[3]
	tasks, err := strconv.Atoi(os.Args[4])
	if err != nil {
		fmt.Fprintln(os.Stderr, "TASKS is a number")
		os.Exit(2)
	}
	if err := run(url, namespace, name, tasks); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(url, namespace, name string, tasks int) error {
	ctx := context.Background()
	offered := 0 // batches this worker offered so far
	completed := 0
	client, err := accord.Connect(ctx, url, &accord.ClientOptions{Namespace: namespace, Owner: name, TTL: ttl})
	if err != nil {
		return err
	}
	defer client.Close()
	say(map[string]any{"ev": "start", "worker": name, "lang": "go"})
	// Every worker offers the whole task list: offers are idempotent, the first one adds them.
	keys := make([]string, tasks)
	for i := range keys {
		keys[i] = fmt.Sprintf("task/%03d", i)
	}
	if _, err := client.Offer(ctx, "task/", keys, nil); err != nil {
		return err
	}
	// A few tasks per claim; an empty claim waits a little for a release or an expiry.
	claim := &accord.ClaimOptions{Limit: claimBatch, TTL: ttl, Timeout: claimWait}
	for {
		leases, err := client.Claim(ctx, "task/", claim)
		if err != nil {
			return err
		}
		if len(leases) == 0 {
			// Nothing claimable: finished once nothing is free or held (a killed worker's task
			// is held until its ttl runs out, then free).
			counts, err := client.Counts(ctx, "task/")
			if err != nil {
				return err
			}
			if counts.Free == 0 && counts.Held == 0 {
				break
			}
			continue
		}
		for _, lease := range leases {
			key, fence := lease.Key(), lease.Fence()
			say(map[string]any{"ev": "acquired", "worker": name, "key": key, "fence": fence})
			time.Sleep(time.Duration(20+rand.Intn(41)) * time.Millisecond) // the "work"
			// Fenced by the core: refused (ErrLeaseLost) if the lease was lost meanwhile.
			err = lease.Done(ctx, map[string]any{"worker": name, "lang": "go", "fence": fence})
			if errors.Is(err, accord.ErrLeaseLost) {
				say(map[string]any{"ev": "lost", "worker": name, "key": key, "fence": fence})
				continue
			}
			if err != nil {
				return err
			}
			say(map[string]any{"ev": "done", "worker": name, "key": key, "fence": fence})
			completed++
			if offered, err = announce(ctx, client, name, offered); err != nil {
				return err
			}
		}
	}
	say(map[string]any{"ev": "exit", "worker": name, "completed": completed})
	return nil
}

// announce: every `batch` completions, one worker notifies: the announcements are a work pool
// too. Whoever sees a batch complete offers its key to the pool `batch/` (idempotent: others
// may offer it too); whoever claims it announces it and marks it done, so each is announced
// once. A worker killed holding one loses it at its ttl, and the next claim takes it. Returns
// the batches offered so far.
func announce(ctx context.Context, client *accord.Client, name string, offered int) (int, error) {
	counts, err := client.Counts(ctx, "task/")
	if err != nil {
		return offered, err
	}
	ready := int(counts.Done) / batch
	if ready > offered {
		keys := make([]string, 0, ready-offered)
		for b := offered + 1; b <= ready; b++ {
			keys = append(keys, fmt.Sprintf("batch/%d", b))
		}
		if _, err := client.Offer(ctx, "batch/", keys, nil); err != nil {
			return offered, err
		}
	}
	if ready == 0 {
		return ready, nil
	}
	leases, err := client.Claim(ctx, "batch/", &accord.ClaimOptions{Limit: ready, TTL: ttl})
	if err != nil {
		return ready, err
	}
	for _, lease := range leases {
		b, err := strconv.Atoi(strings.TrimPrefix(lease.Key(), "batch/"))
		if err != nil {
			return ready, err
		}
		if err := client.Notify(ctx, "demo", fmt.Sprintf("batch %d finished by %s", b, name)); err != nil {
			return ready, err
		}
		if err := lease.Done(ctx, map[string]any{"worker": name}); err != nil {
			return ready, err
		}
		say(map[string]any{"ev": "notify", "worker": name, "batch": b})
	}
	return ready, nil
}
