package localstack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/controller"
	"github.com/dolphin-operator/dolphin/internal/localcluster"
)

// The S3 server of `dolphin local up --s3`, as clusters use it.
const (
	// localS3Secret is the Secret with the S3 server's credentials, in localS3Namespace.
	localS3Secret = "dolphin-s3"
	// localS3Namespace is where the Secret is, so where clusters that use it must be.
	localS3Namespace = "default"
	// localS3Prefix is the key prefix of the printed spec.backup.
	localS3Prefix = "local/"
)

// localS3Backup is spec.backup for a cluster backing up into the local S3 server at endpoint.
func localS3Backup(endpoint string) *dolphinv1.BackupSpec {
	return &dolphinv1.BackupSpec{Store: &dolphinv1.BackupStore{S3: &dolphinv1.S3Store{
		Endpoint:          endpoint,
		Bucket:            localcluster.S3Bucket,
		Prefix:            localS3Prefix,
		ForcePathStyle:    true,
		CredentialsSecret: localS3Secret,
	}}}
}

// localS3Patch is a `kubectl patch --type=merge` body setting spec.backup to localS3Backup.
func localS3Patch(endpoint string) (string, error) {
	b, err := json.Marshal(map[string]any{"spec": map[string]any{"backup": localS3Backup(endpoint)}})
	if err != nil {
		return "", fmt.Errorf("encoding spec.backup: %w", err)
	}
	return string(b), nil
}

// localS3YAML is spec.backup as YAML, under a `backup:` key, to paste into a MySQLCluster's
// spec; written by hand to keep the fields in the API's order (TestLocalS3Snippets checks it
// against the API types).
func localS3YAML(endpoint string) string {
	s := localS3Backup(endpoint).Store.S3
	return fmt.Sprintf("backup:\n  store:\n    s3:\n      endpoint: %s\n      bucket: %s\n      prefix: %s\n"+
		"      forcePathStyle: %t\n      credentialsSecret: %s\n", s.Endpoint, s.Bucket, s.Prefix, s.ForcePathStyle, s.CredentialsSecret)
}

// ensureLocalS3 starts (or keeps) the S3 server on host:port with the bucket, then creates or
// updates the credentials Secret.
func ensureLocalS3(ctx context.Context, cp *localcluster.ControlPlane, binary, host string, port int) (*localcluster.S3Server, error) {
	srv, err := cp.EnsureS3(ctx, localcluster.S3Options{Binary: binary, Host: host, Port: port})
	if err != nil {
		return nil, err
	}
	if err := localcluster.ApplySecret(ctx, cp.Kubeconfig, localS3Namespace, localS3Secret, map[string][]byte{
		controller.S3AccessKeyIDKey:     []byte(srv.Credentials.AccessKeyID),
		controller.S3SecretAccessKeyKey: []byte(srv.Credentials.SecretAccessKey),
	}); err != nil {
		return nil, fmt.Errorf("storing the S3 credentials: %w", err)
	}
	return srv, nil
}

// printLocalS3 prints how to back up into the local S3 server.
func printLocalS3(out io.Writer, srv *localcluster.S3Server) error {
	patch, err := localS3Patch(srv.Endpoint)
	if err != nil {
		return err
	}
	snippet := localS3YAML(srv.Endpoint)
	fmt.Fprintf(out, "S3 for backups: %s, bucket %s, credentials in Secret %s/%s (objects in %s).\n",
		srv.Endpoint, srv.Bucket, localS3Namespace, localS3Secret, srv.Dir)
	fmt.Fprintf(out, "Back up the sample cluster there (the README shows backup and restore):\n\n")
	fmt.Fprintf(out, "  kubectl patch mysqlcluster demo --type=merge -p '%s'\n\n", patch)
	fmt.Fprintf(out, "or set this in the spec of a MySQLCluster in namespace %s:\n\n", localS3Namespace)
	for line := range strings.Lines(snippet) {
		fmt.Fprintf(out, "  %s", line)
	}
	fmt.Fprintln(out)
	return nil
}
