package s3test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// The version here is the one hack/versitygw.sh builds, so Binary finds the cached build.
func TestVersionMatchesScript(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "hack", "versitygw.sh")
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VERSITYGW_VERSION=(\S+)$`).FindSubmatch(b)
	if m == nil || string(m[1]) != Version {
		t.Fatalf("hack/versitygw.sh builds %q, s3test.Version is %q: keep them equal", m, Version)
	}
}

func TestServerStartsWithBucket(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(testing.TB) *Server
	}{{"HTTP", Start}, {"TLS", StartTLS}} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.start(t)
			out, err := s.Client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &s.Bucket})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Contents) != 0 {
				t.Fatalf("new bucket holds %d objects", len(out.Contents))
			}
		})
	}
}
