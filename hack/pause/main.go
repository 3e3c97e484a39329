// Command pause is the sandbox ("pause") process of the real local node's pods: it holds the
// pod's namespaces, reaps orphaned children (it is PID 1 when the pod shares its process
// namespace) and exits on SIGTERM or SIGINT. Built static into the dolphin-pause image by
// `make images`; the node never pulls registry.k8s.io/pause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
