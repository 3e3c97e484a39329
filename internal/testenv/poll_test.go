package testenv

import (
	"errors"
	"testing"
	"time"
)

// TestPoll: nil once the condition holds; the condition's last error when it never does; an
// error, not a pass, when no time is given.
func TestPoll(t *testing.T) {
	n := 0
	if err := Poll(5*time.Second, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 3 {
		t.Errorf("Poll = %v after %d checks, want nil after 3", err, n)
	}
	last := errors.New("still not")
	if err := Poll(50*time.Millisecond, func() error { return last }); !errors.Is(err, last) {
		t.Errorf("Poll of a condition that never holds = %v, want its last error", err)
	}
	if err := Poll(0, func() error { return nil }); err == nil {
		t.Error("Poll with no time passed without checking")
	}
}
