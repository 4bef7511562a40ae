//go:build !accord_pkgconfig && !(linux && amd64)

package accord

// No prebuilt libaccord ships in the module for this platform (lib/ holds linux/amd64 only).
// Build libaccord from the accord repository (`make install PREFIX=…`, which needs Rust) and
// build with `-tags accord_pkgconfig`. The undefined name below turns what would be a page of
// undefined C symbols at link time into this one compile error, naming the fix.
var _ = noPrebuiltLibaccordForThisPlatform_BuildWithTagsAccordPkgconfig
