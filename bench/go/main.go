// accord's Go bench (make bench-go): the uncontended workload of bench/README.md through the Go
// package. One client (schema accord_bench, pool size 1), one key, a loop of TryAcquire +
// Release; writes the JSON of the contract to $ACCORD_BENCH_OUT.
//
// Build it against a release libaccord: `make bench-go` installs one into target/bench-install
// and builds with `-tags accord_pkgconfig` (see mk/bench-c.mk).
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#include "accord.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	accord "github.com/accord/accord/bindings/go"
)

const (
	benchID    = "go/accord"
	benchKey   = "bench-" + benchID
	benchLabel = "accord, Go (cgo, libaccord)"
)

type result struct {
	ID          string             `json:"id"`
	Label       string             `json:"label"`
	Ops         int                `json:"ops"`
	Seconds     float64            `json:"seconds"`
	LatenciesUS []float64          `json:"latencies_us"`
	Metrics     map[string]float64 `json:"metrics"`
}

type report struct {
	Source   string            `json:"source"`
	Versions map[string]string `json:"versions"`
	Results  []result          `json:"results"`
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench-go: "+format+"\n", args...)
	os.Exit(1)
}

// envCount is a non-negative integer from the environment, or fallback when unset or empty.
func envCount(name string, fallback int) int {
	s := os.Getenv(name)
	if s == "" {
		return fallback
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		fail("%s=%s is not a non-negative integer", name, s)
	}
	return v
}

// pair is one TryAcquire + Release: the key must be free.
func pair(ctx context.Context, client *accord.Client) {
	lease, err := client.TryAcquire(ctx, benchKey, nil)
	if err != nil {
		fail("TryAcquire(%s) (the key must be free): %v", benchKey, err)
	}
	if err := lease.Release(ctx); err != nil {
		fail("Release(%s): %v", benchKey, err)
	}
}

// run does len(out) pairs (count when out is nil), storing each one's latency in µs.
func run(ctx context.Context, client *accord.Client, count int, out []float64) {
	for i := 0; i < count; i++ {
		t0 := time.Now()
		pair(ctx, client)
		if out != nil {
			out[i] = float64(time.Since(t0).Nanoseconds()) / 1e3
		}
	}
}

// loadedLibrary names the libaccord shared object this process mapped ("" when linked
// statically): the bench's proof of which build it measured.
func loadedLibrary() string {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(maps), "\n") {
		if i := strings.Index(line, "/"); i >= 0 && strings.Contains(line[i:], "libaccord") {
			return line[i:]
		}
	}
	return ""
}

func main() {
	url := os.Getenv("ACCORD_BENCH_URL")
	if url == "" {
		fail("ACCORD_BENCH_URL is not set")
	}
	outPath := os.Getenv("ACCORD_BENCH_OUT")
	pairs := envCount("ACCORD_BENCH_PAIRS", 5000)
	warmup := envCount("ACCORD_BENCH_WARMUP", 500)
	if pairs < 1 {
		fail("ACCORD_BENCH_PAIRS must be at least 1")
	}

	ctx := context.Background()
	connectStart := time.Now()
	client, err := accord.Connect(ctx, url, &accord.ClientOptions{
		Schema: "accord_bench", PoolSize: 1, ApplicationName: "accord-bench-go",
	})
	if err != nil {
		fail("connect: %v", err)
	}
	connectMS := float64(time.Since(connectStart).Microseconds()) / 1e3

	lat := make([]float64, pairs)
	run(ctx, client, warmup, nil)
	// The measured pairs in two halves (one contender here: A, A).
	first := pairs / 2
	start := time.Now()
	run(ctx, client, first, lat[:first])
	run(ctx, client, pairs-first, lat[first:])
	seconds := time.Since(start).Seconds()
	if err := client.Close(); err != nil {
		fail("close: %v", err)
	}

	rep := report{
		Source: "go",
		Versions: map[string]string{
			"libaccord": C.GoString(C.accord_version()),
			"go":        strings.TrimPrefix(runtime.Version(), "go"),
		},
		Results: []result{{
			ID: benchID, Label: benchLabel, Ops: pairs, Seconds: seconds, LatenciesUS: lat,
			Metrics: map[string]float64{
				"warmup_pairs": float64(warmup), "pool_size": 1, "connect_ms": connectMS,
				"gomaxprocs": float64(runtime.GOMAXPROCS(0)),
			},
		}},
	}
	text, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		fail("encoding the results: %v", err)
	}
	text = append(text, '\n')
	if outPath == "" {
		_, err = os.Stdout.Write(text)
	} else {
		err = os.WriteFile(outPath, text, 0o644)
	}
	if err != nil {
		fail("writing the results: %v", err)
	}

	sorted := slices.Clone(lat)
	slices.Sort(sorted)
	if lib := loadedLibrary(); lib != "" {
		fmt.Fprintf(os.Stderr, "bench-go: libaccord loaded from %s\n", lib)
	}
	fmt.Fprintf(os.Stderr, "bench-go: %s: %d pairs in %.3f s (%.0f pairs/s), p50 %.1f us, p99 %.1f us\n",
		benchID, pairs, seconds, float64(pairs)/seconds, sorted[pairs/2], sorted[(pairs-1)*99/100])
}
