// Package metricsauth guards the operator's metrics endpoint as kube-rbac-proxy and
// controller-runtime's metrics/filters do: the caller's bearer token is checked with a
// TokenReview and its right to GET the path with a SubjectAccessReview, both answered by the
// Kubernetes API server. It uses client-go's typed clients only: controller-runtime's filter
// links k8s.io/apiserver (with CEL and OpenTelemetry), which cost the operator ~16 MB of
// resident memory at start for one HTTP check (docs/design/0037).
package metricsauth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// How long answers are reused: an allowed caller for a minute (as controller-runtime's
// filter caches token reviews), a refused one for ten seconds (a scraper just granted the
// right gets in quickly). reviewTimeout bounds one review.
const (
	allowTTL      = time.Minute
	denyTTL       = 10 * time.Second
	reviewTimeout = 10 * time.Second
	// maxCached bounds the cache: a flood of distinct tokens cannot grow it without limit.
	maxCached = 1024
)

// Reviewer answers who a token belongs to and whether that user may do verb on path.
type Reviewer interface {
	// Authenticate returns the token's user, or ok=false when the token is not valid.
	Authenticate(ctx context.Context, token string) (user authnv1.UserInfo, ok bool, err error)
	// Authorize reports whether user may do verb on the non-resource path, and why not.
	Authorize(ctx context.Context, user authnv1.UserInfo, verb, path string) (allowed bool, reason string, err error)
}

// WithAuthenticationAndAuthorization is a metricsserver.Options.FilterProvider: it needs
// create on tokenreviews (authentication.k8s.io) and subjectaccessreviews
// (authorization.k8s.io); a scraper needs get on the non-resource URL /metrics.
func WithAuthenticationAndAuthorization(config *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	authn, err := authenticationv1.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, fmt.Errorf("metrics authentication client: %w", err)
	}
	authz, err := authorizationv1.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, fmt.Errorf("metrics authorization client: %w", err)
	}
	return Filter(apiReviewer{authn: authn, authz: authz}), nil
}

// Filter returns a metrics filter that asks r about every request (answers cached).
func Filter(r Reviewer) metricsserver.Filter {
	c := &checker{r: r, now: time.Now, cache: map[cacheKey]verdict{}}
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			code, msg := c.check(req)
			if code != http.StatusOK {
				log.V(4).Info("metrics request refused", "status", code, "reason", msg)
				http.Error(w, msg, code)
				return
			}
			next.ServeHTTP(w, req)
		}), nil
	}
}

// checker decides requests and caches the decisions by token, verb and path.
type checker struct {
	r     Reviewer
	now   func() time.Time
	mu    sync.Mutex
	cache map[cacheKey]verdict
}

type cacheKey struct {
	token      [sha256.Size]byte // the token's hash: the token itself is never kept
	verb, path string
}

type verdict struct {
	code    int
	msg     string
	expires time.Time
}

// check returns http.StatusOK when the request may go on, otherwise the status and message to
// answer with: 401 without a valid token, 403 when its user may not, 500 when the API server
// could not answer (not cached).
func (c *checker) check(req *http.Request) (int, string) {
	token, ok := bearerToken(req)
	if !ok {
		return http.StatusUnauthorized, "Unauthorized"
	}
	verb, path := strings.ToLower(req.Method), req.URL.Path
	key := cacheKey{token: sha256.Sum256([]byte(token)), verb: verb, path: path}
	now := c.now()
	c.mu.Lock()
	v, hit := c.cache[key]
	c.mu.Unlock()
	if hit && now.Before(v.expires) {
		return v.code, v.msg
	}
	ctx, cancel := context.WithTimeout(req.Context(), reviewTimeout)
	defer cancel()
	v, err := c.review(ctx, token, verb, path)
	if err != nil {
		return http.StatusInternalServerError, err.Error()
	}
	ttl := denyTTL
	if v.code == http.StatusOK {
		ttl = allowTTL
	}
	v.expires = now.Add(ttl)
	c.mu.Lock()
	if len(c.cache) >= maxCached {
		for k, old := range c.cache {
			if !now.Before(old.expires) {
				delete(c.cache, k)
			}
		}
		if len(c.cache) >= maxCached {
			clear(c.cache)
		}
	}
	c.cache[key] = v
	c.mu.Unlock()
	return v.code, v.msg
}

// review asks the reviewer; an error is the API server's, not the caller's.
func (c *checker) review(ctx context.Context, token, verb, path string) (verdict, error) {
	user, ok, err := c.r.Authenticate(ctx, token)
	if err != nil {
		return verdict{}, fmt.Errorf("authentication failed: %w", err)
	}
	if !ok {
		return verdict{code: http.StatusUnauthorized, msg: "Unauthorized"}, nil
	}
	allowed, reason, err := c.r.Authorize(ctx, user, verb, path)
	if err != nil {
		return verdict{}, fmt.Errorf("authorization for user %s failed: %w", user.Username, err)
	}
	if !allowed {
		msg := fmt.Sprintf("Authorization denied for user %s", user.Username)
		if reason != "" {
			msg += ": " + reason
		}
		return verdict{code: http.StatusForbidden, msg: msg}, nil
	}
	return verdict{code: http.StatusOK}, nil
}

// bearerToken is the token of an "Authorization: Bearer <token>" header.
func bearerToken(req *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(req.Header.Get("Authorization")), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
		return "", false
	}
	return token, true
}

// apiReviewer asks the Kubernetes API server.
type apiReviewer struct {
	authn authenticationv1.AuthenticationV1Interface
	authz authorizationv1.AuthorizationV1Interface
}

func (a apiReviewer) Authenticate(ctx context.Context, token string) (authnv1.UserInfo, bool, error) {
	tr, err := a.authn.TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return authnv1.UserInfo{}, false, fmt.Errorf("creating a TokenReview: %w", err)
	}
	return tr.Status.User, tr.Status.Authenticated, nil
}

func (a apiReviewer) Authorize(ctx context.Context, user authnv1.UserInfo, verb, path string) (bool, string, error) {
	extra := make(map[string]authzv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := a.authz.SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("creating a SubjectAccessReview: %w", err)
	}
	return sar.Status.Allowed && !sar.Status.Denied, sar.Status.Reason, nil
}
