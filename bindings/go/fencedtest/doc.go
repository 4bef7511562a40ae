// Package fencedtest tests accord's fenced writes (Lease.Fenced, Lease.DoneIn) with real
// drivers: database/sql over pgx's stdlib driver, and pgx's own Tx. A module of its own, so
// that the accord module itself depends on no driver.
package fencedtest
