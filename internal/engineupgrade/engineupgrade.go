// Package engineupgrade brings a MariaDB data directory up to the server that runs on it.
//
// A server of a newer release series (11.8) starts on a data directory an older one (10.11)
// wrote, but its system tables (mysql.*, sys, performance_schema) keep the old definitions
// until mariadb-upgrade runs: privileges, statistics and new features then misbehave quietly,
// which is how peers' users found upgrade steps silently skipped (mariadb-operator#1920).
// The official image runs the tool only when MARIADB_AUTO_UPGRADE is set, from an entrypoint
// Dolphin does not use; so the instance agent runs it, asked by the operator after every
// instance restart (docs/design/0048).
//
// The tool decides itself whether work is due: it compares the version recorded in the data
// directory (mariadb_upgrade_info; mysql_upgrade_info before 11.x) with the server's and does
// nothing when they agree. It writes nothing to the binary log (--skip-write-binlog): each
// server upgrades its own tables, and a replica's upgrade never becomes a transaction the
// others lack.
package engineupgrade

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Tool is the default upgrade tool, looked up on PATH (the MariaDB image's /usr/bin).
const Tool = "mariadb-upgrade"

// infoFiles are the files the tool records the version of an upgraded data directory in,
// newest name first.
var infoFiles = []string{"mariadb_upgrade_info", "mysql_upgrade_info"}

// Options say how to reach the server and where its data directory is.
type Options struct {
	// Tool is the mariadb-upgrade to run (Tool on PATH when empty).
	Tool string
	// DataDir is the server's data directory, where the tool records what it did.
	DataDir string
	// Socket is the server's Unix socket; Host and Port are used when it is empty.
	Socket string
	Host   string
	Port   int
	// User and Password are an account with the privileges of the tool (Dolphin's own).
	// The password reaches the tool in its environment (MYSQL_PWD), never its arguments.
	User, Password string
}

// Result says what a Run found and did.
type Result struct {
	// From is the version the data directory was upgraded to before ("" when it recorded
	// none: a data directory the tool never ran on).
	From string
	// To is the version recorded after the run: the server's.
	To string
	// Ran is true when the tool upgraded something (the recorded version changed).
	Ran bool
	// Took is how long the tool ran.
	Took time.Duration
}

// Run runs mariadb-upgrade against the server and reports what the data directory recorded
// before and after. The tool's output is part of the error when it fails.
func Run(ctx context.Context, o Options) (Result, error) {
	tool := o.Tool
	if tool == "" {
		tool = Tool
	}
	var res Result
	from, err := RecordedVersion(o.DataDir)
	if err != nil {
		return res, err
	}
	res.From = from
	args := []string{"--skip-write-binlog", "--user=" + o.User}
	if o.Socket != "" {
		// No TLS over the local socket: it protects nothing there, and from 11.4 the tool's
		// clients verify the server's certificate by default, which failed one of its phases
		// with "TLS/SSL error: self-signed certificate" on a server with the certificate it
		// makes itself (an e2e run under load, 2026-12-06; MariaDB/mariadb-docker#592). A
		// socket connection counts as secure for require_secure_transport.
		args = append(args, "--socket="+o.Socket, "--skip-ssl")
	} else {
		args = append(args, "--protocol=tcp", "--host="+o.Host, "--port="+strconv.Itoa(o.Port))
	}
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Env = append(os.Environ(), "MYSQL_PWD="+o.Password)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	err = cmd.Run()
	res.Took = time.Since(began)
	if err != nil {
		return res, fmt.Errorf("%s: %w: %s", tool, err, lastLines(out.String(), 8))
	}
	if res.To, err = RecordedVersion(o.DataDir); err != nil {
		return res, err
	}
	if res.To == "" {
		return res, fmt.Errorf("%s succeeded but recorded no version in %s: %s", tool, o.DataDir, lastLines(out.String(), 8))
	}
	res.Ran = res.To != res.From
	return res, nil
}

// RecordedVersion is the version the upgrade tool last recorded in dataDir, e.g.
// "11.8.9-MariaDB" ("" when it recorded none).
func RecordedVersion(dataDir string) (string, error) {
	r, err := ReadRecord(dataDir)
	return r.Version(), err
}

// Record is what the upgrade tool left in a data directory: the file (one of infoFiles) and
// its bytes. The zero Record means none.
type Record struct {
	File    string
	Content []byte
}

// maxRecordBytes bounds a record: the tool writes a version string.
const maxRecordBytes = 256

// recordVersion is what a record's version looks like: "10.11.19-MariaDB", "11.8.9-MariaDB-log".
var recordVersion = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+[0-9A-Za-z.+~_-]*$`)

// ReadRecord reads the upgrade tool's record in dataDir (the zero Record when it wrote none).
func ReadRecord(dataDir string) (Record, error) {
	for _, name := range infoFiles {
		b, err := os.ReadFile(filepath.Join(dataDir, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return Record{}, fmt.Errorf("reading the upgrade record: %w", err)
		}
		return Record{File: name, Content: b}, nil
	}
	return Record{}, nil
}

// Version is the version the record names ("" for none). The file holds the version and,
// from some releases on, a NUL or newline after it.
func (r Record) Version() string {
	return strings.TrimRight(string(r.Content), "\x00\n\r ")
}

// Encode is the record as one header-safe token, "FILE:BASE64", or "" for none. A clone's
// source sends it with the stream (agent.CloneUpgradeRecordTrailer): mariadb-backup copies
// the tables but not this file, and without it the tool checks every table of a copy that is
// as upgraded as its source.
func (r Record) Encode() string {
	if r.File == "" {
		return ""
	}
	return r.File + ":" + r.encodeContent()
}

func (r Record) encodeContent() string { return base64.StdEncoding.EncodeToString(r.Content) }

// DecodeRecord parses Encode's token, refusing anything but one of the tool's file names and
// a version.
func DecodeRecord(s string) (Record, error) {
	file, enc, ok := strings.Cut(s, ":")
	if !ok || !slices.Contains(infoFiles, file) {
		return Record{}, fmt.Errorf("upgrade record %q: want one of %v, a colon and base64", s, infoFiles)
	}
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return Record{}, fmt.Errorf("upgrade record %q: %w", s, err)
	}
	r := Record{File: file, Content: b}
	if len(b) > maxRecordBytes || !recordVersion.MatchString(r.Version()) {
		return Record{}, fmt.Errorf("upgrade record %q does not hold a version", s)
	}
	return r, nil
}

// TransferableRecord is dataDir's record encoded (Encode) for a copy of the data directory to
// carry — a clone's stream, a backup's manifest — or "" when there is none, it cannot be read,
// or it is not one a receiver takes (DecodeRecord: the 11.x tool leaves an empty file behind
// a run that did not finish).
func TransferableRecord(dataDir string) string {
	r, err := ReadRecord(dataDir)
	if err != nil {
		return ""
	}
	enc := r.Encode()
	if _, err := DecodeRecord(enc); err != nil {
		return ""
	}
	return enc
}

// WriteRecord writes r into dataDir as the tool would have (the file synced; the caller syncs
// the directory, as the restore does before its markers), unless the directory has a record
// already (which it keeps: the tool's own word wins); written says whether it wrote.
func WriteRecord(dataDir string, r Record) (written bool, err error) {
	if r.File == "" {
		return false, nil
	}
	if have, err := ReadRecord(dataDir); err != nil || have.File != "" {
		return false, err
	}
	path := filepath.Join(dataDir, r.File)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o660)
	if err != nil {
		return false, fmt.Errorf("writing the upgrade record: %w", err)
	}
	_, err = f.Write(r.Content)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("writing the upgrade record %s: %w", path, err)
	}
	return true, nil
}

// lastLines is the last n lines of s, on one line each separated by " | ".
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
