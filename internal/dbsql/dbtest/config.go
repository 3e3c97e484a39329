package dbtest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/dolphin-operator/dolphin/internal/mycnf"
)

// smallProfile are spec.mysqlConfig-style overrides that keep an idle server
// around 55 MB RSS instead of 100 MB.
var smallProfile = map[string]string{
	"innodb_buffer_pool_size": "16M",
	"innodb_log_file_size":    "16M",
	"performance_schema":      "OFF",
	"max_connections":         "60",
}

// maxSocketPath is the longest Unix socket path the kernel accepts (108 bytes
// with the terminating NUL).
const maxSocketPath = 107

// newInstance lays out instance n under dir and reserves its address.
func newInstance(dir string, n int) (*Instance, error) {
	name := fmt.Sprintf("db-%d", n)
	idir := filepath.Join(dir, name)
	inst := &Instance{
		Name:       name,
		Port:       mycnf.Port,
		Dir:        idir,
		ConfigFile: filepath.Join(idir, "my.cnf"),
		DataDir:    filepath.Join(idir, "data"),
		ErrorLog:   filepath.Join(idir, "error.log"),
		serverID:   uint32(n + 1),
	}
	if p := inst.socket(); len(p) > maxSocketPath {
		return nil, fmt.Errorf("socket path %s is longer than %d bytes: set TMPDIR to a shorter directory", p, maxSocketPath)
	}
	for _, d := range []string{idir, inst.DataDir, filepath.Join(idir, "tmp")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, err
		}
	}
	lock, err := reserveAddr(inst.Port)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	inst.Host, inst.lock = lock.host, lock
	return inst, nil
}

func (i *Instance) socket() string      { return filepath.Join(i.Dir, "mysqld.sock") }
func (i *Instance) instanceCnf() string { return filepath.Join(i.Dir, "instance.cnf") }

// writeConfig writes the instance's my.cnf and instance.cnf: the production
// MariaDB file from mycnf with the small profile, its !include pointed at the
// instance's own instance.cnf, then the test-only settings, then extra. Later
// settings in an option file win.
func writeConfig(i *Instance, extra map[string]string) error {
	prod, err := mycnf.Generate(mycnf.Input{Flavor: mycnf.FlavorMariaDB, Overrides: smallProfile})
	if err != nil {
		return err
	}
	include := "!include " + mycnf.InstanceConfigFile + "\n"
	if !strings.Contains(prod, include) {
		return fmt.Errorf("generated my.cnf has no line %q to redirect", strings.TrimSpace(include))
	}
	var b strings.Builder
	b.WriteString(strings.Replace(prod, include, "!include "+i.instanceCnf()+"\n", 1))
	b.WriteString("\n# ---- dbtest: test-only settings, overriding the production paths above ----\n")
	b.WriteString("[client]\n")
	fmt.Fprintf(&b, "host=%s\nport=%d\nsocket=%s\nuser=root\n", i.Host, i.Port, i.socket())
	b.WriteString("\n[mysqld]\n")
	fmt.Fprintf(&b, "datadir=%s\n", i.DataDir)
	fmt.Fprintf(&b, "socket=%s\n", i.socket())
	fmt.Fprintf(&b, "pid_file=%s\n", filepath.Join(i.Dir, "mysqld.pid"))
	fmt.Fprintf(&b, "bind_address=%s\n", i.Host)
	fmt.Fprintf(&b, "port=%d\n", i.Port)
	if os.Geteuid() == 0 {
		b.WriteString("# Started as root, mariadbd refuses to run without user=root.\n")
		b.WriteString("user=root\n")
	}
	fmt.Fprintf(&b, "log_error=%s\n", i.ErrorLog)
	fmt.Fprintf(&b, "tmpdir=%s\n", filepath.Join(i.Dir, "tmp"))
	if len(extra) > 0 {
		b.WriteString("\n# ---- dbtest: Options.ExtraConfig ----\n[mysqld]\n")
		keys := make([]string, 0, len(extra))
		for k := range extra {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if extra[k] == "" {
				b.WriteString(k + "\n")
			} else {
				b.WriteString(k + "=" + extra[k] + "\n")
			}
		}
	}
	if err := os.WriteFile(i.ConfigFile, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(i.instanceCnf(), []byte(mycnf.InstanceConfig(i.serverID, i.Host)), 0o644)
}

// addrLock is a loopback address reserved for one instance of this process.
// Test binaries of different packages run in parallel: each picks random
// addresses and holds an exclusive flock on a per-address file in
// os.TempDir() for as long as the instance lives, so that no other process
// takes the address while the server is being initialised or restarted.
type addrLock struct {
	host string
	path string
	f    *os.File
}

// reserveAddr picks a random free address 127.A.B.C, A in 100..250, where
// nothing listens on port and no other test process holds the lock.
func reserveAddr(port int) (*addrLock, error) {
	dir := filepath.Join(os.TempDir(), "dolphin-dbtest-addrs")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, err
	}
	var lastErr error
	for range 50 {
		host := fmt.Sprintf("127.%d.%d.%d", 100+rand.IntN(151), rand.IntN(256), 1+rand.IntN(254))
		path := filepath.Join(dir, host+".lock")
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			lastErr = fmt.Errorf("%s is locked by another test process: %w", host, err)
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			f.Close()
			lastErr = fmt.Errorf("%s:%d is not free: %w", host, port, err)
			continue
		}
		ln.Close()
		return &addrLock{host: host, path: path, f: f}, nil
	}
	return nil, fmt.Errorf("no free loopback address found; last: %w", lastErr)
}

// release frees the address. The file is removed while still locked, so a
// process that opens the path afterwards gets a new file.
func (l *addrLock) release() {
	if l == nil || l.f == nil {
		return
	}
	os.Remove(l.path)
	l.f.Close()
	l.f = nil
}
