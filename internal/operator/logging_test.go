package operator

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
)

func TestQuietShutdownDemotesOnlyTheReleasedLease(t *testing.T) {
	var lines []string
	base := funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) }, funcr.Options{})
	l := quietShutdown(base).WithName("mgr").WithValues("k", "v")

	l.Error(errors.New(leaseLostError), afterStopMsg)
	l.Error(errors.New(leaseLostError), "some other place")
	l.Error(errors.New("boom"), afterStopMsg)

	if len(lines) != 3 {
		t.Fatalf("got %d lines: %q", len(lines), lines)
	}
	if strings.Contains(lines[0], `"error"`) || !strings.Contains(lines[0], "leader lease released on shutdown") ||
		!strings.Contains(lines[0], `"k"="v"`) || !strings.HasPrefix(lines[0], "mgr") {
		t.Errorf("released lease on shutdown: %q, want an info line with the logger's name and values", lines[0])
	}
	for _, l := range lines[1:] {
		if !strings.Contains(l, `"error"`) {
			t.Errorf("other errors must stay errors: %q", l)
		}
	}
}
