// The floor of accord's etcd rows in `make bench` (bench/README.md, scenario 14): etcd's own Go
// lock recipe, go.etcd.io/etcd/client/v3/concurrency.Mutex, on the cluster in
// $ACCORD_BENCH_ETCD_URL (etcd://host:port,…), with the workloads accord's Rust program runs
// there: TryLock + Unlock on one key (one client, one session), 64 goroutines each on a key of
// its own (one client, one session), and the hand-off from Unlock to a blocked Lock. Writes the
// JSON of the contract to $ACCORD_BENCH_OUT.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// The tasks of scenario 2 and its etcd row.
const tasks = 64

type result struct {
	ID          string             `json:"id"`
	Label       string             `json:"label"`
	Ops         int                `json:"ops"`
	Seconds     float64            `json:"seconds"`
	LatenciesUS []float64          `json:"latencies_us"`
	Metrics     map[string]float64 `json:"metrics"`
}

func (r *result) add(samples []time.Duration, elapsed time.Duration) {
	for _, s := range samples {
		r.LatenciesUS = append(r.LatenciesUS, float64(s.Nanoseconds()/100)/10)
	}
	r.Ops += len(samples)
	r.Seconds += elapsed.Seconds()
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench-etcd-go: "+format+"\n", args...)
	os.Exit(1)
}

func envCount(name string, fallback int) int {
	s := os.Getenv(name)
	if s == "" {
		return fallback
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		fail("%s must be a non-negative integer, got %q", name, s)
	}
	return n
}

// endpoints are the members an etcd:// URL names (accord's form; the prefix is ignored).
func endpoints(url string) []string {
	rest, ok := strings.CutPrefix(url, "etcd://")
	if !ok {
		fail("ACCORD_BENCH_ETCD_URL must be etcd://host:port[,host:port…], got %q", url)
	}
	rest, _, _ = strings.Cut(rest, "?")
	rest = strings.TrimSuffix(rest, "/")
	var out []string
	for _, host := range strings.Split(rest, ",") {
		out = append(out, "http://"+host)
	}
	return out
}

func connect(url string) *clientv3.Client {
	client, err := clientv3.New(clientv3.Config{Endpoints: endpoints(url), DialTimeout: 5 * time.Second})
	if err != nil {
		fail("connect: %v", err)
	}
	return client
}

func session(client *clientv3.Client) *concurrency.Session {
	s, err := concurrency.NewSession(client, concurrency.WithTTL(60))
	if err != nil {
		fail("session: %v", err)
	}
	return s
}

// pair is one TryLock + Unlock, the lock found free.
func pair(ctx context.Context, m *concurrency.Mutex) {
	if err := m.TryLock(ctx); err != nil {
		fail("TryLock %s: %v", m.Key(), err)
	}
	if err := m.Unlock(ctx); err != nil {
		fail("Unlock: %v", err)
	}
}

func rounds(ctx context.Context, m *concurrency.Mutex, n int) ([]time.Duration, time.Duration) {
	samples := make([]time.Duration, 0, n)
	started := time.Now()
	for range n {
		t := time.Now()
		pair(ctx, m)
		samples = append(samples, time.Since(t))
	}
	return samples, time.Since(started)
}

func uncontended(ctx context.Context, url string, pairs, warmup int) result {
	client := connect(url)
	defer client.Close()
	s := session(client)
	defer s.Close()
	m := concurrency.NewMutex(s, "/bench-go/pair")
	r := result{ID: "go/etcd-mutex", Label: "etcd concurrency.Mutex, Go (TryLock + Unlock)", Metrics: map[string]float64{}}
	rounds(ctx, m, warmup)
	samples, elapsed := rounds(ctx, m, pairs)
	r.add(samples, elapsed)
	return r
}

func concurrent(ctx context.Context, url string, perTask, warmup int) result {
	client := connect(url)
	defer client.Close()
	s := session(client)
	defer s.Close()
	r := result{
		ID:      "go/etcd-mutex-64",
		Label:   fmt.Sprintf("etcd concurrency.Mutex, %d goroutines, one client and session", tasks),
		Metrics: map[string]float64{"tasks": tasks},
	}
	round := func(n int) ([]time.Duration, time.Duration) {
		var mu sync.Mutex
		var all []time.Duration
		var wg sync.WaitGroup
		started := time.Now()
		for task := range tasks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m := concurrency.NewMutex(s, fmt.Sprintf("/bench-go/64/%d", task))
				samples, _ := rounds(ctx, m, n)
				mu.Lock()
				all = append(all, samples...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		return all, time.Since(started)
	}
	round(warmup)
	for range 2 {
		r.add(round(perTask / 2))
	}
	return r
}

func handoff(ctx context.Context, url string, n int) result {
	holderClient, waiterClient := connect(url), connect(url)
	defer holderClient.Close()
	defer waiterClient.Close()
	holder, waiter := session(holderClient), session(waiterClient)
	defer holder.Close()
	defer waiter.Close()
	const key = "/bench-go/handoff"
	r := result{ID: "go/etcd-handoff-mutex", Label: "etcd concurrency.Mutex: Lock woken by the holder's Unlock", Metrics: map[string]float64{}}
	started := time.Now()
	var samples []time.Duration
	for i := 0; i <= n; i++ {
		held := concurrency.NewMutex(holder, key)
		if err := held.TryLock(ctx); err != nil {
			fail("handoff TryLock: %v", err)
		}
		holds := make(chan time.Time, 1)
		go func() {
			m := concurrency.NewMutex(waiter, key)
			if err := m.Lock(ctx); err != nil {
				fail("handoff Lock: %v", err)
			}
			at := time.Now()
			if err := m.Unlock(ctx); err != nil {
				fail("handoff Unlock: %v", err)
			}
			holds <- at
		}()
		// As accord's hand-off: the waiter has had time to queue; the release falls anywhere.
		time.Sleep(time.Duration(15_000+rand.IntN(10_000)) * time.Microsecond)
		releasedAt := time.Now()
		if err := held.Unlock(ctx); err != nil {
			fail("handoff Unlock: %v", err)
		}
		at := <-holds
		if i > 0 {
			samples = append(samples, at.Sub(releasedAt))
		}
	}
	r.add(samples, time.Since(started))
	return r
}

func main() {
	url := os.Getenv("ACCORD_BENCH_ETCD_URL")
	out := os.Getenv("ACCORD_BENCH_OUT")
	if url == "" || out == "" {
		fail("ACCORD_BENCH_ETCD_URL and ACCORD_BENCH_OUT must be set")
	}
	pairs := envCount("ACCORD_BENCH_PAIRS", 5000)
	warmup := envCount("ACCORD_BENCH_WARMUP", 500)
	if pairs < 2 {
		fail("ACCORD_BENCH_PAIRS must be at least 2")
	}
	ctx := context.Background()
	// The same counts as the Rust program's etcd rows (bench/rust/src/etcd.rs).
	results := []result{
		uncontended(ctx, url, pairs, warmup),
		concurrent(ctx, url, max(pairs/25, 8), max(warmup/25, 2)),
		handoff(ctx, url, max(pairs/25, 10)),
	}
	for _, r := range results {
		fmt.Printf("  %-26s %9.0f ops/s\n", r.ID, float64(r.Ops)/r.Seconds)
	}
	data, err := json.Marshal(map[string]any{
		"source":   "go-etcd",
		"versions": map[string]string{"etcd client": "go.etcd.io/etcd/client/v3 v3.6.16"},
		"results":  results,
	})
	if err != nil {
		fail("json: %v", err)
	}
	if err := os.WriteFile(out, data, 0o644); err != nil {
		fail("write %s: %v", out, err)
	}
}
