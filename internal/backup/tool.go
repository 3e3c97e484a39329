package backup

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/dolphin-operator/dolphin/internal/mycnf"
)

// stderrTail is how much of a tool's stderr is kept for error messages, and errorLines how
// many of its last lines an error quotes.
const (
	stderrTail = 64 << 10
	errorLines = 20
	// maxLine bounds a line handed to a line callback; longer lines are cut.
	maxLine = 64 << 10
	// waitDelay bounds how long a killed tool's pipes may stay open.
	waitDelay = 10 * time.Second
)

// findTool returns path when set, else name looked up on PATH, /usr/bin and /usr/sbin.
func findTool(path, name string) (string, error) {
	if path != "" {
		return path, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/bin", "/usr/sbin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH, in /usr/bin or /usr/sbin", name)
}

// toolOutput keeps the last stderrTail bytes a tool wrote and hands every complete line to
// onLine. It is an io.Writer for exec.Cmd.Stderr; exec calls it from one goroutine.
type toolOutput struct {
	onLine func(string)

	mu      sync.Mutex
	tail    []byte // at most 2*stderrTail, trimmed to stderrTail
	partial []byte // the current line so far, at most maxLine
	total   int64
}

func (o *toolOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.total += int64(len(p))
	o.tail = append(o.tail, p...)
	if len(o.tail) > 2*stderrTail {
		o.tail = append(o.tail[:0], o.tail[len(o.tail)-stderrTail:]...)
	}
	for rest := p; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			o.partial = appendCapped(o.partial, rest)
			break
		}
		o.partial = appendCapped(o.partial, rest[:i])
		if o.onLine != nil {
			o.onLine(string(o.partial))
		}
		o.partial, rest = o.partial[:0], rest[i+1:]
	}
	return len(p), nil
}

func appendCapped(b, p []byte) []byte {
	if room := maxLine - len(b); len(p) > room {
		p = p[:max(room, 0)]
	}
	return append(b, p...)
}

// flush hands an unterminated last line to onLine.
func (o *toolOutput) flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.partial) > 0 && o.onLine != nil {
		o.onLine(string(o.partial))
	}
	o.partial = o.partial[:0]
}

// lastLines returns the last n lines kept, or "(no output)".
func (o *toolOutput) lastLines(n int) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.tail
	if len(t) > stderrTail {
		t = t[len(t)-stderrTail:]
	}
	return lastLines(t, n)
}

// lastLines returns the last n non-empty lines of text joined by newlines.
func lastLines(text []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(text), "\n"), "\n")
	var keep []string
	for i := len(lines) - 1; i >= 0 && len(keep) < n; i-- {
		if l := strings.TrimRight(lines[i], "\r"); strings.TrimSpace(l) != "" {
			keep = append(keep, l)
		}
	}
	if len(keep) == 0 {
		return "(no output)"
	}
	for i, j := 0, len(keep)-1; i < j; i, j = i+1, j-1 {
		keep[i], keep[j] = keep[j], keep[i]
	}
	return strings.Join(keep, "\n")
}

// optionFileValue quotes s for an option file (mycnf.OptionValue).
func optionFileValue(s string) (string, error) { return mycnf.OptionValue(s) }

// WriteClientPasswordFile writes a 0600 option file in dir holding password in its [client]
// section, for a client given it as --defaults-file (its first option), and returns its path;
// the caller removes it.
func WriteClientPasswordFile(dir, password string) (string, error) {
	return writePasswordFile(dir, password, "")
}

// writePasswordFile writes a 0600 option file in dir holding password in a [client] group,
// and returns its path. An empty password writes an empty group. When include is set the
// file starts with "!include <include>", so that it can stand for that file as
// --defaults-file (mariadb-backup takes either --defaults-file or --defaults-extra-file as
// its first option, not both); the password group after it wins.
func writePasswordFile(dir, password, include string) (string, error) {
	var b strings.Builder
	b.WriteString("# Written by Dolphin for one mariadb-backup run; removed when it ends.\n")
	if include != "" {
		if strings.ContainsAny(include, "\r\n") {
			return "", fmt.Errorf("option file name %q has a line break", include)
		}
		b.WriteString("!include " + include + "\n")
	}
	b.WriteString("[client]\n")
	if password != "" {
		v, err := optionFileValue(password)
		if err != nil {
			return "", fmt.Errorf("password: %w", err)
		}
		b.WriteString("password=" + v + "\n")
	}
	return mycnf.WriteSecretFile(dir, ".dolphin-backup-*.cnf", b.String())
}

// toolVersion runs `<tool> --version` and returns e.g. "mariadb-backup 10.11.14-MariaDB".
func toolVersion(ctx context.Context, tool string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, "--version")
	cmd.WaitDelay = waitDelay
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w: %s", tool, err, lastLines(out, errorLines))
	}
	v := parseToolVersion(string(out))
	if v == "" {
		return "", fmt.Errorf("%s --version printed nothing", tool)
	}
	return v, nil
}

// exitError describes how a tool ended, with its last stderr lines.
func exitError(what string, err error, out *toolOutput) error {
	return fmt.Errorf("%s failed: %w; its last output:\n%s", what, err, out.lastLines(errorLines))
}
