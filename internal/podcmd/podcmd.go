// Package podcmd holds the subcommands of the binary that runs inside Dolphin's pods (the
// `/dolphin` of Dolphin's image, built from cmd/dolphin-pod; cmd/dolphin offers them too, for
// the host-process node): the agent sidecar, the seed and restore init containers, the
// verification pod, the store server, the binlog archiver and the kept copies (read where they
// are: on an instance's volume, through kubectl exec). Each command parses its flags and the
// secrets of its environment into the options of the internal package that does the work, and
// calls it.
//
//	agent.go          `dolphin agent`           internal/agent, internal/agentops (its operations)
//	seed.go           `dolphin seed`            internal/seed
//	restore.go        `dolphin restore`         internal/restore
//	verify.go         `dolphin verify`          internal/restore (verification)
//	copy_binary.go    `dolphin copy-binary`     (copies this binary into a shared volume)
//	nosync.go         `dolphin nosync`          internal/nosync (the install script's flushes skipped)
//	storeserver.go    `dolphin store-server`    internal/objectstore (a PVC as a store)
//	binlogarchive.go  `dolphin binlog-archive`  internal/binlog
//	kept.go           `dolphin kept`            internal/binlog (kept copies)
//	storeflags.go     the store flags several commands share
//
// How seed, restore and verify report their outcome to the operator is internal/termination.
package podcmd

import "github.com/spf13/cobra"

// Commands returns a new instance of every in-pod subcommand.
func Commands() []*cobra.Command {
	return []*cobra.Command{
		newAgentCmd(), newBackupCmd(), newCopyBinaryCmd(), newRestoreCmd(), newVerifyCmd(), newSeedCmd(),
		newStoreServerCmd(), newBinlogArchiveCmd(), newKeptCmd(), newNosyncCmd(),
	}
}
