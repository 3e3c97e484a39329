package imagebuild

import (
	"fmt"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// NonRootUID is the user Dolphin's image runs as (the distroless "nonroot" user).
const NonRootUID = 65532

// DolphinInputs are what Dolphin's image is made of.
type DolphinInputs struct {
	// Dolphin is the pod binary (cmd/dolphin-pod: the in-pod commands alone) copied into
	// database pods (/dolphin).
	Dolphin string
	// Operator is the operator-only binary (/dolphin-operator, the entrypoint).
	Operator string
	// CACerts, when set, is a CA bundle installed as /etc/ssl/certs/ca-certificates.crt (S3
	// over TLS).
	CACerts string
	// Version and Revision are the OCI version and source revision labels.
	Version, Revision string
	// Created is SOURCE_DATE_EPOCH (the commit's time).
	Created time.Time
}

// Dolphin builds Dolphin's image: the two static binaries, a passwd naming the nonroot user,
// a CA bundle and /tmp, run as 65532:65532. Layers are written in dir.
func Dolphin(dir string, in DolphinInputs) (v1.Image, error) {
	files := append(baseFiles(NonRootUID, "nonroot"),
		File{Path: "/dolphin", Mode: 0o755, Source: in.Dolphin},
		File{Path: "/dolphin-operator", Mode: 0o755, Source: in.Operator},
	)
	if in.CACerts != "" {
		if _, err := os.Stat(in.CACerts); err != nil {
			return nil, fmt.Errorf("the CA bundle: %w", err)
		}
		files = append(files,
			File{Path: "/etc/ssl", Mode: 0o755, Dir: true},
			File{Path: "/etc/ssl/certs", Mode: 0o755, Dir: true},
			File{Path: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Source: in.CACerts})
	}
	l, err := Layer(dir, files, in.Created)
	if err != nil {
		return nil, err
	}
	return Image([]v1.Layer{l}, Config{
		User:       fmt.Sprintf("%d:%d", NonRootUID, NonRootUID),
		Entrypoint: []string{"/dolphin-operator"},
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		WorkingDir: "/",
		Created:    in.Created,
		Labels: map[string]string{
			"org.opencontainers.image.title":       "dolphin",
			"org.opencontainers.image.description": "Dolphin, a Kubernetes operator for highly available MariaDB and MySQL",
			"org.opencontainers.image.source":      "https://github.com/dolphin-operator/dolphin",
			"org.opencontainers.image.version":     in.Version,
			"org.opencontainers.image.revision":    in.Revision,
			"org.opencontainers.image.created":     in.Created.UTC().Format(time.RFC3339),
			"org.opencontainers.image.licenses":    "Apache-2.0",
		},
	})
}

// PauseUID is the user of the pause image (as the upstream pause image).
const PauseUID = 65535

// Pause builds the node's sandbox image from a static program that waits for SIGTERM and
// reaps children (hack/pause).
func Pause(dir, binary string, created time.Time) (v1.Image, error) {
	l, err := Layer(dir, []File{{Path: "/pause", Mode: 0o755, Source: binary}}, created)
	if err != nil {
		return nil, err
	}
	return Image([]v1.Layer{l}, Config{
		User: fmt.Sprintf("%d:%d", PauseUID, PauseUID), Entrypoint: []string{"/pause"}, Created: created,
		Labels: map[string]string{"org.opencontainers.image.title": "dolphin-pause"},
	})
}

// baseFiles are /etc/passwd and /etc/group naming root and one user, and the folders every
// program expects (/tmp writable by all, the user's home).
func baseFiles(uid int, user string) []File {
	home := "/home/" + user
	return []File{
		{Path: "/etc", Mode: 0o755, Dir: true},
		{Path: "/etc/passwd", Mode: 0o644, Body: fmt.Appendf(nil,
			"root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:%s:/sbin/nologin\n", user, uid, uid, user, home)},
		{Path: "/etc/group", Mode: 0o644, Body: fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\n", user, uid)},
		{Path: "/home", Mode: 0o755, Dir: true},
		{Path: home, Mode: 0o700, Dir: true, UID: uid, GID: uid},
		{Path: "/root", Mode: 0o700, Dir: true},
		{Path: "/tmp", Mode: 0o1777, Dir: true},
	}
}
