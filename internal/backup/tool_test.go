package backup

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestOptionFileValue(t *testing.T) {
	for in, want := range map[string]string{
		"plain":           `"plain"`,
		`p#w "q" \x 'y' `: `"p#w \"q\" \\x 'y' "`,
		"tab\tnl\n":       `"tab\tnl\n"`,
		"":                `""`,
	} {
		if got, err := optionFileValue(in); err != nil || got != want {
			t.Errorf("optionFileValue(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	if _, err := optionFileValue("a\x00b"); err == nil {
		t.Error("a NUL byte was accepted")
	}
}

func TestWritePasswordFile(t *testing.T) {
	dir := t.TempDir()
	p, err := writePasswordFile(dir, `s3cr#t"`, "")
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("password file: %v, mode %v; want 0600", err, st.Mode())
	}
	b, _ := os.ReadFile(p)
	if !strings.Contains(string(b), "\n[client]\npassword=\"s3cr#t\\\"\"\n") {
		t.Errorf("password file:\n%s", b)
	}
	p, err = writePasswordFile(dir, "", "/etc/mysql/my.cnf")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); strings.Contains(string(b), "password") || !strings.Contains(string(b), "\n!include /etc/mysql/my.cnf\n[client]\n") {
		t.Errorf("an empty password with an include:\n%s", b)
	}
}

func TestToolOutputKeepsTailAndLines(t *testing.T) {
	var lines []string
	o := &toolOutput{onLine: func(l string) { lines = append(lines, l) }}
	// Lines split across writes, then far more output than the tail keeps.
	o.Write([]byte("first li"))
	o.Write([]byte("ne\nsecond\nthi"))
	for i := range 20000 {
		fmt.Fprintf(o, "[00] line %d of noise\n", i)
	}
	o.Write([]byte("Failed to connect: Access denied\nlast, unterminated"))
	o.flush()
	if lines[0] != "first line" || lines[1] != "second" || lines[2] != "thi[00] line 0 of noise" {
		t.Errorf("first lines: %q", lines[:3])
	}
	if got := lines[len(lines)-1]; got != "last, unterminated" {
		t.Errorf("last line %q", got)
	}
	if len(o.tail) > 2*stderrTail {
		t.Errorf("kept %d bytes of output, want at most %d", len(o.tail), 2*stderrTail)
	}
	got := o.lastLines(3)
	want := "[00] line 19999 of noise\nFailed to connect: Access denied\nlast, unterminated"
	if got != want {
		t.Errorf("lastLines(3) = %q, want %q", got, want)
	}
	if got := (&toolOutput{}).lastLines(5); got != "(no output)" {
		t.Errorf("lastLines of nothing = %q", got)
	}
	// A huge line is cut, not kept whole.
	var long string
	o = &toolOutput{onLine: func(l string) { long = l }}
	o.Write([]byte(strings.Repeat("x", 3*maxLine) + "\n"))
	if len(long) != maxLine {
		t.Errorf("a %d-byte line was handed on as %d bytes, want %d", 3*maxLine, len(long), maxLine)
	}
}
