package podcmd

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

// newCopyBinaryCmd returns `dolphin copy-binary DEST`: an init container of a database pod
// runs it to put the dolphin binary into a shared emptyDir, from which the agent sidecar (in
// the database image) runs it.
func newCopyBinaryCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "copy-binary DEST",
		Short: "Copy this dolphin executable to DEST (mode 0755, atomically)",
		Long: "Copy the running dolphin executable to DEST with mode 0755. The copy is written\n" +
			"next to DEST and renamed over it, so DEST is never seen half-written. When DEST is a\n" +
			"directory, the copy is DEST/dolphin.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := runningExecutable()
			if err != nil {
				return fmt.Errorf("finding the running executable: %w", err)
			}
			dest, err := copyBinary(src, args[0])
			if err != nil {
				return err
			}
			_, _ = fmt.Fprintf(cmd.OutOrStdout(), "copied %s to %s\n", src, dest)
			return nil
		},
	}
}

// copyBinary copies src to dest (dest/dolphin when dest is a directory) through a temporary
// file in dest's directory renamed over dest, with mode 0755. It returns the path written.
func copyBinary(src, dest string) (_ string, err error) {
	if fi, err := os.Stat(dest); err == nil && fi.IsDir() {
		dest = filepath.Join(dest, "dolphin")
	}
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("copy-binary: %w", err)
	}
	defer func() { _ = in.Close() }()
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("copy-binary: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, in); err != nil {
		return "", fmt.Errorf("copy-binary: copying %s to %s: %w", src, tmp.Name(), err)
	}
	// Chmod is not subject to the umask.
	if err := tmp.Chmod(0o755); err != nil {
		return "", fmt.Errorf("copy-binary: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("copy-binary: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("copy-binary: %w", err)
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return "", fmt.Errorf("copy-binary: %w", err)
	}
	// Make the rename durable; a failure here does not undo the copy.
	if d, err := os.Open(filepath.Dir(dest)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return dest, nil
}

// runningExecutable is a path that opens this process's executable: /proc/self/exe where it
// exists (it opens even when the user may not traverse the folders of the real path, as on
// the local node, whose binary may sit in a folder only root reads), else os.Executable.
func runningExecutable() (string, error) {
	if f, err := os.Open("/proc/self/exe"); err == nil {
		_ = f.Close()
		return "/proc/self/exe", nil
	}
	return os.Executable()
}
