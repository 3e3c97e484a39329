package backup

import (
	"fmt"
	"os"
)

// Exports for TestBenchBackup, which lives in package backup_test because it drives the agent
// (internal/agent imports this package).

// SameGTID reports whether two GTID positions are the same set of domains and sequences.
var SameGTID = sameGTID

// BaselineCommand returns the mariadb-backup program and the arguments Take would run it with
// for o (the same connection, datadir and stream options), its password in a 0600 option
// file in o.TmpDir and its --target-dir a new directory there. cleanup removes both.
func BaselineCommand(o TakeOptions) (tool string, args []string, cleanup func(), err error) {
	if err := o.defaults(); err != nil {
		return "", nil, nil, fmt.Errorf("baseline: %w", err)
	}
	if tool, err = findTool(o.Tool, "mariadb-backup"); err != nil {
		return "", nil, nil, fmt.Errorf("baseline: %w", err)
	}
	pwFile, err := writePasswordFile(o.TmpDir, o.Password, o.DefaultsFile)
	if err != nil {
		return "", nil, nil, fmt.Errorf("baseline: writing the password file: %w", err)
	}
	target, err := os.MkdirTemp(o.TmpDir, ".dolphin-baseline-target-")
	if err != nil {
		os.Remove(pwFile)
		return "", nil, nil, fmt.Errorf("baseline: %w", err)
	}
	cleanup = func() {
		os.Remove(pwFile)
		os.RemoveAll(target)
	}
	return tool, o.args(pwFile, target), cleanup, nil
}
