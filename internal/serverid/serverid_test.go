package serverid

import "testing"

func TestReserved(t *testing.T) {
	for id, want := range map[uint64]bool{0: false, 1: false, 999: false, 1000: true, 1008: true, 1009: false, Archive: true, Archive - 1: false} {
		if got := Reserved(id); got != want {
			t.Errorf("Reserved(%d) = %v, want %v", id, got, want)
		}
	}
}
