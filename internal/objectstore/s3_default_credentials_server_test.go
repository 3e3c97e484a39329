package objectstore_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/objectstore/s3test"
)

// With no access key and DefaultCredentials, the store takes its credentials from the AWS
// SDK's default chain — here its first link, the AWS_* environment variables, as a pod with
// IAM roles for service accounts gets a token file instead — against a real S3 server that
// refuses anonymous requests; without DefaultCredentials the same store is anonymous, and is
// refused.
func TestServerS3DefaultCredentialChain(t *testing.T) {
	srv := s3test.Start(t)
	// Nothing from this machine's own AWS configuration may answer instead.
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	cfg := srv.Config("chain/")
	cfg.AccessKeyID, cfg.SecretAccessKey = "", ""

	anonymous, err := objectstore.New(context.Background(), objectstore.Config{S3: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	if err := objectstore.Check(context.Background(), anonymous); err == nil {
		t.Fatal("an anonymous store was let in: the test would prove nothing")
	}

	cfg.DefaultCredentials = true
	st, err := objectstore.New(context.Background(), objectstore.Config{S3: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	if err := objectstore.Check(context.Background(), st); err != nil {
		t.Fatalf("Check with the default chain: %v", err)
	}
	put(t, st, "x", []byte("through the chain"))
	if got := get(t, st, "x"); !bytes.Equal(got, []byte("through the chain")) {
		t.Fatalf("read back %q", got)
	}
}
