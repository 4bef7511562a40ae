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
	announced := map[int]bool{}
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
			if err := announce(ctx, client, name, announced); err != nil {
				return err
			}
		}
	}
	say(map[string]any{"ev": "exit", "worker": name, "completed": completed})
	return nil
}

// announce: every `batch` completions, one worker (whoever gets the batch's key first) notifies.
func announce(ctx context.Context, client *accord.Client, name string, announced map[int]bool) error {
	page, err := client.List(ctx, &accord.ListQuery{Prefix: "task/", State: accord.StateDone, Limit: 1000})
	if err != nil {
		return err
	}
	for b := 1; b <= len(page.Items)/batch; b++ {
		if announced[b] {
			continue
		}
		lease, err := client.TryAcquire(ctx, fmt.Sprintf("batch/%d", b), nil)
		if errors.Is(err, accord.ErrDone) {
			announced[b] = true
			continue
		}
		if errors.Is(err, accord.ErrHeld) {
			continue
		}
		if err != nil {
			return err
		}
		if err := client.Notify(ctx, "demo", fmt.Sprintf("batch %d finished by %s", b, name)); err != nil {
			return err
		}
		if err := lease.Done(ctx, map[string]any{"worker": name}); err != nil {
			return err
		}
		say(map[string]any{"ev": "notify", "worker": name, "batch": b})
		announced[b] = true
	}
	return nil
}
