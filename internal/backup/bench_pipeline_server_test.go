//go:build linux

package backup_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// The pipeline a team would write by hand, TestBenchBackup's second baseline: the same tool
// with the same arguments and the same compression (zstd level 1 on every core: Dolphin's
// encoder runs klauspost/compress at SpeedFastest, its equivalent of level 1), uploaded and
// downloaded with the AWS CLI at its defaults (8 MiB parts, 10 requests at once), with no
// checksum of its own and no manifest.
//
//	backup:  mariadb-backup --backup --stream=mbstream … | zstd -1 -T0 | aws s3 cp - s3://bucket/key
//	restore: aws s3 cp s3://bucket/key - | zstd -d | mbstream -x -C dir; mariadb-backup --prepare
//
// (rclone 1.60, Debian's, was tried first: its rcat took 18 s for 470 MB into versitygw
// where the AWS CLI takes 3 s; a baseline that slow would flatter Dolphin.)
const (
	// handZstdLevel is the hand pipeline's compression level.
	handZstdLevel = "-1"
	// handKey is the hand pipeline's object in the bench's bucket.
	handKey = "hand/backup.mbstream.zst"
)

// handTools are the programs of the hand pipeline besides mariadb-backup
// (hack/install-pipeline-tools.sh installs aws and zstd; mbstream comes with mariadb-backup).
type handTools struct {
	aws, awsVersion, zstd, mbstream string
	// awsStart is how long `aws --version` took: the CLI's start-up, part of each of its runs.
	awsStart time.Duration
}

// requireHandTools finds aws, zstd and mbstream on PATH or fails the test saying how to
// install them.
func requireHandTools(t *testing.T) handTools {
	t.Helper()
	var h handTools
	for name, p := range map[string]*string{"aws": &h.aws, "zstd": &h.zstd, "mbstream": &h.mbstream} {
		path, err := exec.LookPath(name)
		if err != nil {
			t.Fatalf("%s is needed for the hand-written pipeline baseline: run hack/install-pipeline-tools.sh (make bench-backup does): %v", name, err)
		}
		*p = path
	}
	began := time.Now()
	out, err := exec.CommandContext(t.Context(), h.aws, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v: %s", h.aws, err, out)
	}
	h.awsStart = time.Since(began)
	h.awsVersion = strings.Fields(string(out) + " ?")[0]
	return h
}

// awsCmd is `aws s3 <args>` against the store cfg with its credentials, reading no
// configuration of this machine's (the AWS SDK settings of the machine are not the
// server's: AWS_CA_BUNDLE, AWS_PROFILE, a config file); the server's CA, when it has one, is
// its CA bundle.
func awsCmd(t *testing.T, h handTools, cfg objectstore.S3Config, args ...string) *exec.Cmd {
	t.Helper()
	empty := filepath.Join(t.TempDir(), "aws-config")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "AWS_") })
	if len(cfg.CACertPEM) > 0 {
		ca := filepath.Join(t.TempDir(), "ca.pem")
		if err := os.WriteFile(ca, cfg.CACertPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		env = append(env, "AWS_CA_BUNDLE="+ca)
	}
	env = append(env,
		"AWS_CONFIG_FILE="+empty, "AWS_SHARED_CREDENTIALS_FILE="+empty,
		"AWS_ACCESS_KEY_ID="+cfg.AccessKeyID, "AWS_SECRET_ACCESS_KEY="+cfg.SecretAccessKey,
		"AWS_DEFAULT_REGION="+objectstore.DefaultS3Region, "AWS_PAGER=")
	c := exec.CommandContext(t.Context(), h.aws, append([]string{"--endpoint-url", cfg.Endpoint, "s3"}, args...)...)
	c.Env = env
	return c
}

// stage is one program of a pipeline and what it did.
type stage struct {
	cmd    *exec.Cmd
	stderr strings.Builder
	exited time.Duration // since the pipeline started
	cpu    time.Duration // user + system
	maxRSS int64         // kB
	err    error
}

// pipelineRun is what runPipeline measured.
type pipelineRun struct {
	stages []*stage
	took   time.Duration // start → the last program's exit
}

func (p pipelineRun) cpu() time.Duration {
	var d time.Duration
	for _, s := range p.stages {
		d += s.cpu
	}
	return d
}

// runPipeline starts cmds with each one's stdout piped into the next one's stdin (as a
// shell's `a | b | c`, the kernel's pipes, nothing copied by this process) and waits for all
// of them. It fails the test, quoting each program's last lines, when one of them fails.
func runPipeline(t *testing.T, cmds ...*exec.Cmd) pipelineRun {
	t.Helper()
	run := pipelineRun{}
	var closeAfterStart []*os.File
	for i, c := range cmds {
		s := &stage{cmd: c}
		c.Stderr = &s.stderr
		run.stages = append(run.stages, s)
		if i == len(cmds)-1 {
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		c.Stdout, cmds[i+1].Stdin = w, r
		closeAfterStart = append(closeAfterStart, r, w)
	}
	began := time.Now()
	for _, s := range run.stages {
		if err := s.cmd.Start(); err != nil {
			t.Fatalf("starting %s: %v", s.cmd.Path, err)
		}
	}
	// This process keeps no end of any pipe, so that each program sees EOF or EPIPE as in a
	// shell.
	for _, f := range closeAfterStart {
		f.Close()
	}
	done := make(chan *stage, len(run.stages))
	for _, s := range run.stages {
		go func() {
			s.err = s.cmd.Wait()
			s.exited = time.Since(began)
			if ru, ok := s.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
				s.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
				s.maxRSS = ru.Maxrss
			}
			done <- s
		}()
	}
	for range run.stages {
		<-done
	}
	run.took = time.Since(began)
	var errs []error
	for _, s := range run.stages {
		if s.err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w; its output:\n%s",
				filepath.Base(s.cmd.Path), strings.Join(s.cmd.Args[1:], " "), s.err, tail(s.stderr.String(), 10)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	return run
}

// handBackupRun is what handBackup measured.
type handBackupRun struct {
	pipelineRun
	stored int64 // bytes of the object
}

// handBackup runs mariadb-backup with Take's arguments for o into zstd and aws s3 cp, into
// handKey of the store cfg, and returns the object's size.
func handBackup(t *testing.T, h handTools, o backup.TakeOptions, cfg objectstore.S3Config, store objectstore.Store) handBackupRun {
	t.Helper()
	ctx := t.Context()
	tool, args, cleanup, err := backup.BaselineCommand(o)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	run := runPipeline(t,
		exec.CommandContext(ctx, tool, args...),
		exec.CommandContext(ctx, h.zstd, handZstdLevel, "-T0", "-q", "-c"),
		awsCmd(t, h, cfg, "cp", "-", "s3://"+cfg.Bucket+"/"+handKey))
	if out := run.stages[0].stderr.String(); !strings.Contains(out, "completed OK!") {
		t.Fatalf("hand pipeline: %s did not say \"completed OK!\":\n%s", tool, tail(out, 10))
	}
	info, err := store.Stat(ctx, handKey)
	if err != nil {
		t.Fatalf("hand pipeline: the object aws s3 cp wrote: %v", err)
	}
	return handBackupRun{pipelineRun: run, stored: info.Size}
}

// handRestoreRun is what handRestore measured.
type handRestoreRun struct {
	extract pipelineRun
	prepare time.Duration
	total   time.Duration
}

// handRestore downloads handKey with aws s3 cp into zstd -d and mbstream -x in a new
// directory, then runs mariadb-backup --prepare on it (with the --use-memory Dolphin's
// restore uses); the directory is removed afterwards.
func handRestore(t *testing.T, h handTools, cfg objectstore.S3Config) handRestoreRun {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	target := filepath.Join(dir, "data")
	if err := os.Mkdir(target, 0o750); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(target) // a second copy of the dataset: not kept until the test ends
	tool, err := exec.LookPath("mariadb-backup")
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	ex := runPipeline(t,
		awsCmd(t, h, cfg, "cp", "s3://"+cfg.Bucket+"/"+handKey, "-"),
		exec.CommandContext(ctx, h.zstd, "-d", "-q", "-c"),
		exec.CommandContext(ctx, h.mbstream, "-x", "-C", target))
	prepBegan := time.Now()
	out, err := exec.CommandContext(ctx, tool, "--prepare", "--target-dir="+target, "--use-memory="+benchUseMemory).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "completed OK!") {
		t.Fatalf("hand pipeline: mariadb-backup --prepare: %v:\n%s", err, tail(string(out), 10))
	}
	return handRestoreRun{extract: ex, prepare: time.Since(prepBegan), total: time.Since(began)}
}

// stageFigures is "name exit_s cpu_s" for each stage, for the report.
func stageFigures(p pipelineRun) string {
	var b strings.Builder
	for i, s := range p.stages {
		if i > 0 {
			b.WriteString(" | ")
		}
		fmt.Fprintf(&b, "%s exit=%.2fs cpu=%.2fs rss=%dMB", filepath.Base(s.cmd.Path), s.exited.Seconds(), s.cpu.Seconds(), s.maxRSS/1024)
	}
	return b.String()
}
