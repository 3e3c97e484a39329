//go:build linux

package localproxy

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
)

// addAddress puts ip/32 on device (idempotent: `ip addr replace`).
func addAddress(ctx context.Context, device, ip string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", "addr", "replace", ip+"/32", "dev", device)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("adding ClusterIP %s to %s: %w: %s", ip, device, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// freeBind lets a socket bind an address that is not (yet) on any device.
func freeBind(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_IP, syscall.IP_FREEBIND, 1)
	}); err != nil {
		return err
	}
	return serr
}
