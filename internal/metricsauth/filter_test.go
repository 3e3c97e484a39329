package metricsauth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
)

// fakeReviewer knows two tokens: "scraper" (may get /metrics) and "nobody" (may not). It
// counts the reviews, so that caching shows. The real API server's answers are covered by
// cmd/dolphin-operator's TestEnvtestOperatorBinary (401, 403 and 200 through the operator binary).
type fakeReviewer struct {
	authn, authz int
	fail         error
}

func (f *fakeReviewer) Authenticate(_ context.Context, token string) (authnv1.UserInfo, bool, error) {
	f.authn++
	if f.fail != nil {
		return authnv1.UserInfo{}, false, f.fail
	}
	switch token {
	case "scraper", "nobody":
		return authnv1.UserInfo{Username: "system:serviceaccount:default:" + token}, true, nil
	}
	return authnv1.UserInfo{}, false, nil
}

func (f *fakeReviewer) Authorize(_ context.Context, u authnv1.UserInfo, verb, path string) (bool, string, error) {
	f.authz++
	if u.Username == "system:serviceaccount:default:scraper" && verb == "get" && path == "/metrics" {
		return true, "", nil
	}
	return false, "no RBAC rule", nil
}

func TestFilter(t *testing.T) {
	f := &fakeReviewer{}
	now := time.Unix(1000, 0)
	c := &checker{r: f, now: func() time.Time { return now }, cache: map[cacheKey]verdict{}}
	ask := func(method, path, auth string) int {
		req := httptest.NewRequest(method, path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		code, _ := c.check(req)
		return code
	}
	for _, tc := range []struct {
		name, method, path, auth string
		want                     int
	}{
		{"no token", "GET", "/metrics", "", http.StatusUnauthorized},
		{"not a bearer token", "GET", "/metrics", "Basic c2NyYXBlcjp4", http.StatusUnauthorized},
		{"empty bearer", "GET", "/metrics", "Bearer ", http.StatusUnauthorized},
		{"unknown token", "GET", "/metrics", "Bearer forged", http.StatusUnauthorized},
		{"user without the right", "GET", "/metrics", "Bearer nobody", http.StatusForbidden},
		{"scraper", "GET", "/metrics", "Bearer scraper", http.StatusOK},
		{"scraper, scheme in lower case", "GET", "/metrics", "bearer scraper", http.StatusOK},
		{"scraper, another path", "GET", "/debug", "Bearer scraper", http.StatusForbidden},
		{"scraper, another verb", "POST", "/metrics", "Bearer scraper", http.StatusForbidden},
	} {
		if got := ask(tc.method, tc.path, tc.auth); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}

	// Answers are cached: allowed for a minute, refused for ten seconds.
	f.authn, f.authz = 0, 0
	ask("GET", "/metrics", "Bearer scraper")
	ask("GET", "/metrics", "Bearer nobody")
	if f.authn != 0 || f.authz != 0 {
		t.Errorf("cached answers asked again: %d token reviews, %d access reviews", f.authn, f.authz)
	}
	now = now.Add(denyTTL + time.Second)
	ask("GET", "/metrics", "Bearer scraper")
	ask("GET", "/metrics", "Bearer nobody")
	if f.authn != 1 || f.authz != 1 {
		t.Errorf("after %v: %d token reviews, %d access reviews, want the refusal reviewed again only", denyTTL, f.authn, f.authz)
	}
	now = now.Add(allowTTL)
	ask("GET", "/metrics", "Bearer scraper")
	if f.authn != 2 {
		t.Errorf("after %v: the allowed token was not reviewed again", allowTTL)
	}

	// The API server failing is a 500, never cached, never a pass.
	f.fail = errors.New("connection refused")
	if got := ask("GET", "/metrics", "Bearer other"); got != http.StatusInternalServerError {
		t.Errorf("API server down: %d, want 500", got)
	}
	f.fail = nil
	if got := ask("GET", "/metrics", "Bearer other"); got != http.StatusUnauthorized {
		t.Errorf("API server back: %d, want 401 (the failure was cached?)", got)
	}

	// The cache is bounded.
	for i := range maxCached + 10 {
		ask("GET", "/metrics", "Bearer forged-"+string(rune('a'+i%26))+time.Duration(i).String())
	}
	if n := len(c.cache); n > maxCached {
		t.Errorf("cache holds %d answers, bound %d", n, maxCached)
	}
}

// The filter answers with the checker's status and passes allowed requests on.
func TestFilterHandler(t *testing.T) {
	h, err := Filter(&fakeReviewer{})(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("metrics"))
	}))
	if err != nil {
		t.Fatal(err)
	}
	for auth, want := range map[string]int{"": 401, "Bearer nobody": 403, "Bearer scraper": 200} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		h.ServeHTTP(rec, req)
		if rec.Code != want || (want == 200) != (rec.Body.String() == "metrics") {
			t.Errorf("%q: %d %q, want %d", auth, rec.Code, rec.Body.String(), want)
		}
	}
}
