package termination

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestReportThenLast is the protocol end to end: what a command reports for an error, cut to
// the 2048 bytes a termination message keeps of the log, decodes back to the error's Line.
func TestReportThenLast(t *testing.T) {
	err := errors.New("restore: fixing up: the temporary server exited (exit status 1); its last output:\n" +
		"2026 [ERROR] one\n\n2026 [ERROR] two\n; the next attempt starts over")
	for _, e := range []error{err, errors.New("start " + strings.Repeat("x", 5000) + " end")} {
		var log bytes.Buffer
		log.WriteString(strings.Repeat("earlier progress line\n", 300))
		Report(&log, RestorePrefix, e)
		message := log.String()
		if len(message) > 2048 {
			message = message[len(message)-2048:]
		}
		got, ok := Result(message, RestorePrefix)
		if !ok || RestorePrefix+got != Line(RestorePrefix, e) {
			t.Errorf("decoded %q (prefix %v), want %q", got, ok, Line(RestorePrefix, e))
		}
	}
	if got, want := OneLine(err.Error()), "restore: fixing up: the temporary server exited (exit status 1); its last output: "+
		"2026 [ERROR] one | 2026 [ERROR] two | ; the next attempt starts over"; got != want {
		t.Errorf("OneLine\n got %q\nwant %q", got, want)
	}
	long := OneLine("start " + strings.Repeat("x", 5000) + " end")
	if len(long) > MaxLine || !strings.HasPrefix(long, "start ") || !strings.HasSuffix(long, " end") || !strings.Contains(long, " … ") {
		t.Errorf("OneLine of a long error: %d bytes %q…", len(long), long[:40])
	}
	if _, ok := Result("dolphin-seed: done\n", VerifyPrefix); ok {
		t.Error("Result accepted another command's line")
	}
}
