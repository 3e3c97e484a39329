// Package termination is how Dolphin's one-shot pod commands (`dolphin seed`, `dolphin
// restore`, `dolphin verify`) tell the operator how they ended, and how the operator reads it.
//
// The command's last line of output is "<prefix><result>", on one line of at most MaxLine
// bytes. Kubernetes puts the tail of the output in the container's termination message
// (terminationMessagePolicy FallbackToLogsOnError keeps the log's last 2048 bytes or 80 lines,
// whichever is less: the last line is in either; `dolphin
// verify` also writes the line to the message file), and Last takes that line back out. This
// file is the protocol's only encoder (Line, Report) and decoder (Last, Result).
package termination

import (
	"fmt"
	"io"
	"strings"
)

// The prefixes each command starts its lines with.
const (
	SeedPrefix    = "dolphin-seed: "
	RestorePrefix = "dolphin-restore: "
	VerifyPrefix  = "dolphin-verify: "
)

// VerifiedResult starts the result of a verification that succeeded, after VerifyPrefix.
const VerifiedResult = "ok"

// MaxLine bounds the last line (after the prefix), so that the termination message (the
// log's last 2048 bytes) holds all of it.
const MaxLine = 1500

// Line is the last line a command writes for err: prefix + the error on one line.
func Line(prefix string, err error) string { return prefix + OneLine(err.Error()) }

// Report writes err to w: in full first when it spans lines, then as its Line.
func Report(w io.Writer, prefix string, err error) {
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		_, _ = fmt.Fprintf(w, "%sfailed:\n%s\n", prefix, msg)
	}
	_, _ = fmt.Fprintln(w, prefix+OneLine(msg))
}

// OneLine puts msg on one line ("a:\nb\nc" → "a: b | c") and, when it is longer than
// MaxLine, cuts out its middle.
func OneLine(msg string) string {
	var parts []string
	for l := range strings.Lines(msg) {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			if strings.HasSuffix(parts[i-1], ":") {
				b.WriteString(" ")
			} else {
				b.WriteString(" | ")
			}
		}
		b.WriteString(p)
	}
	s := b.String()
	if len(s) > MaxLine {
		head, tail := MaxLine*2/3, MaxLine/3-len(" … ")
		s = strings.ToValidUTF8(s[:head]+" … "+s[len(s)-tail:], "")
	}
	return s
}

// Last is the last non-empty line of a termination message, trimmed: the command's result.
func Last(message string) string {
	lines := strings.Split(strings.TrimSpace(message), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// Result is the last line of message without prefix, and whether it carried prefix.
func Result(message, prefix string) (string, bool) {
	return strings.CutPrefix(Last(message), prefix)
}
