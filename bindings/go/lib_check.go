//go:build linux && amd64 && !accord_pkgconfig

package accord

// The default build links lib/linux_amd64/libaccord.a (accord.go), which a released module
// carries but a clone of the repository does not until it is built. Without this check the
// missing file surfaces as a raw linker error; a cgo preamble is compiled before anything is
// linked, and __has_include looks the file up on the include path (-I${SRCDIR}), so its
// absence stops the build here with what to run.

/*
#cgo CFLAGS: -I${SRCDIR}
#if !__has_include("lib/linux_amd64/libaccord.a")
#error "accord: bindings/go/lib/linux_amd64/libaccord.a is missing (a clone of the repository has none; a released module carries it). Run `make go-lib` in the repository (needs Rust), or build with -tags accord_pkgconfig against an installed libaccord (README.md, \"Go quick start\")."
#endif
*/
import "C"
