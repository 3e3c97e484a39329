package mycnf

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// OptionValue quotes s for a MySQL/MariaDB option file: double quotes, with the escapes the
// option file reader undoes (\\ \" \n \r \t \b), so that '#', quotes, leading and trailing
// spaces and newlines survive. A NUL byte cannot be written.
func OptionValue(s string) (string, error) {
	if strings.ContainsRune(s, 0) {
		return "", errors.New("contains a NUL byte")
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "\t", `\t`, "\b", `\b`)
	return `"` + r.Replace(s) + `"`, nil
}

// ClientOption is one key=value of a [client] group.
type ClientOption struct{ Key, Value string }

// WriteClientFile writes a 0600 option file in dir whose [client] group holds options (each
// value quoted by OptionValue), for a client given it as its first option
// (--defaults-extra-file or --defaults-file), and returns its path; the caller removes it.
// Secrets given so never appear on a command line.
func WriteClientFile(dir, purpose string, options ...ClientOption) (string, error) {
	var b strings.Builder
	b.WriteString("# Written by Dolphin for " + strings.ReplaceAll(purpose, "\n", " ") + "; removed when it ends.\n[client]\n")
	for _, o := range options {
		if o.Key == "" || strings.ContainsAny(o.Key, "=\r\n[]# ") {
			return "", fmt.Errorf("option name %q", o.Key)
		}
		v, err := OptionValue(o.Value)
		if err != nil {
			return "", fmt.Errorf("option %s: %w", o.Key, err)
		}
		b.WriteString(o.Key + "=" + v + "\n")
	}
	return WriteSecretFile(dir, ClientFilePattern, b.String())
}

// ClientFilePattern is the name pattern of WriteClientFile's files (a glob), for removing the
// ones a killed process left.
const ClientFilePattern = ".dolphin-client-*.cnf"

// WriteSecretFile writes content to a new file in dir named after pattern (os.CreateTemp's),
// readable by its owner only, and returns its path; nothing is left behind when it fails.
// The caller removes the file.
func WriteSecretFile(dir, pattern, content string) (string, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return "", err
	}
	err = f.Chmod(0o600) // CreateTemp's mode already; said again whatever the umask did
	if err == nil {
		_, err = f.WriteString(content)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}
