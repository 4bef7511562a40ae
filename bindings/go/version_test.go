package accord

import "testing"

// The module's Version is the linked library's: a module zip that carries another release's
// libaccord.a (or a stale one in lib/) fails here.
func TestVersionIsTheLibrarys(t *testing.T) {
	if got := libraryVersion(); got != Version {
		t.Fatalf("accord.Version is %q but the linked libaccord is %q", Version, got)
	}
}
