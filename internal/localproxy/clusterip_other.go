//go:build !linux

package localproxy

import (
	"context"
	"errors"
	"syscall"
)

func addAddress(context.Context, string, string) error {
	return errors.New("ClusterIPs are served on Linux only")
}

func freeBind(string, string, syscall.RawConn) error { return nil }
