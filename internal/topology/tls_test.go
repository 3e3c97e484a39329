package topology

import (
	"crypto/x509"
	"testing"
	"time"
)

func TestNeedsReload(t *testing.T) {
	issued := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	cert := func(raw string, notBefore time.Time) *x509.Certificate {
		return &x509.Certificate{Raw: []byte(raw), NotBefore: notBefore, NotAfter: notBefore.Add(90 * 24 * time.Hour)}
	}
	current := cert("current", issued)
	for _, tc := range []struct {
		name            string
		served, current *x509.Certificate
		want            bool
	}{
		{"serves the current one", cert("current", issued), current, false},
		{"serves an older one", cert("old", issued.Add(-60*24*time.Hour)), current, true},
		{"serves one of another CA issued before, expiring later", &x509.Certificate{Raw: []byte("other CA"), NotBefore: issued.Add(-time.Hour), NotAfter: issued.Add(365 * 24 * time.Hour)}, current, true},
		{"TLS off", cert("old", issued.Add(-time.Hour)), nil, false},
		{"serves a newer one (renewed meanwhile)", cert("newer", issued.Add(time.Hour)), current, false},
	} {
		if got := needsReload(tc.served, tc.current); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
