package dbtest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/dolphin-operator/dolphin/internal/mycnf"
)

// A fresh data directory is a copy of a template made once by
// mariadb-install-db and kept in a cache shared by all test processes, like
// mysql-test-run's install.db: under load install-db takes 3–6 s, a copy of
// its 34 MB result 0.1–0.3 s. The bootstrap runs without the binary log, so
// the template holds no GTIDs and no server_id; nothing in it names a path or
// an address.
//
// The cache lives in $DOLPHIN_CACHE_DIR/dbtest-datadir, by default
// ${XDG_CACHE_HOME:-$HOME/.cache}/dolphin/dbtest-datadir (the folder
// hack/control-plane.sh uses). An entry is keyed by the MariaDB binaries
// (path, size, mtime), the production my.cnf, Options.ExtraConfig and the
// install-db flags, so a package upgrade or a config change makes a new one.
// Deleting the folder is always safe.

// templateVersion changes the key when the way templates are made changes.
const templateVersion = "1"

// installDBArgs follow --defaults-file on mariadb-install-db's command line.
var installDBArgs = []string{"--auth-root-authentication-method=normal", "--skip-test-db"}

var (
	templatesMu sync.Mutex
	templates   = map[string]*templateEntry{}
)

type templateEntry struct {
	once sync.Once
	dir  string
	err  error
}

// datadirTemplate returns a data directory initialised by mariadb-install-db
// for a server configured with extra, creating it on first use.
func datadirTemplate(extra map[string]string) (string, error) {
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	key, err := templateKey(extra)
	if err != nil {
		return "", err
	}
	templatesMu.Lock()
	e := templates[key]
	if e == nil {
		e = &templateEntry{}
		templates[key] = e
	}
	templatesMu.Unlock()
	e.once.Do(func() { e.dir, e.err = makeTemplate(cache, key, extra) })
	return e.dir, e.err
}

func cacheDir() (string, error) {
	if d := os.Getenv("DOLPHIN_CACHE_DIR"); d != "" {
		return filepath.Join(d, "dbtest-datadir"), nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "dolphin", "dbtest-datadir"), nil
}

// templateKey hashes everything that shapes what install-db writes.
func templateKey(extra map[string]string) (string, error) {
	bin, err := findBinaries()
	if err != nil {
		return "", err
	}
	prod, err := mycnf.Generate(mycnf.Input{Flavor: mycnf.FlavorMariaDB, Overrides: smallProfile})
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "dbtest template %s\n%s\n", templateVersion, prod)
	for _, p := range []string{bin.server, bin.installDB} {
		st, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d %d\n", p, st.Size(), st.ModTime().UnixNano())
	}
	fmt.Fprintf(h, "install-db %q euid=%v\n", installDBArgs, os.Geteuid() == 0)
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "extra %q=%q\n", k, extra[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:24], nil
}

// makeTemplate returns cache/key, running install-db into a scratch folder
// and renaming its result into place unless another process got there first.
func makeTemplate(cache, key string, extra map[string]string) (string, error) {
	final := filepath.Join(cache, key)
	if st, err := os.Stat(final); err == nil && st.IsDir() {
		return final, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	// Scratch folders of test processes that died while making a template.
	if stale, _ := filepath.Glob(filepath.Join(cache, "*.tmp-*")); len(stale) > 0 {
		for _, d := range stale {
			if st, err := os.Stat(d); err == nil && time.Since(st.ModTime()) > 10*time.Minute {
				os.RemoveAll(d)
			}
		}
	}
	scratch, err := os.MkdirTemp(cache, key+".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(scratch)
	// A stand-in instance: install-db needs a complete my.cnf. The bootstrap
	// does not listen on the network, so the address is never used.
	inst := &Instance{
		Name:       "template",
		Host:       "127.0.0.1",
		Port:       mycnf.Port,
		Dir:        scratch,
		ConfigFile: filepath.Join(scratch, "my.cnf"),
		DataDir:    filepath.Join(scratch, "data"),
		ErrorLog:   filepath.Join(scratch, "error.log"),
		serverID:   1,
	}
	if p := inst.socket(); len(p) > maxSocketPath {
		return "", fmt.Errorf("socket path %s is too long", p)
	}
	for _, d := range []string{inst.DataDir, filepath.Join(scratch, "tmp")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return "", err
		}
	}
	if err := writeConfig(inst, extra); err != nil {
		return "", err
	}
	if err := inst.runInstallDB(); err != nil {
		return "", err
	}
	if err := os.Rename(inst.DataDir, final); err != nil {
		// Another test process renamed its copy first: use that one.
		if st, statErr := os.Stat(final); statErr == nil && st.IsDir() {
			return final, nil
		}
		return "", err
	}
	return final, nil
}

// initDataDir fills the empty DataDir: a copy of template, or, when there is
// none, a run of mariadb-install-db.
func (i *Instance) initDataDir(template string) error {
	if template == "" {
		return i.runInstallDB()
	}
	if err := os.CopyFS(i.DataDir, os.DirFS(template)); err != nil {
		// Start over with install-db on an empty directory.
		cpErr := fmt.Errorf("%s: copying the datadir template %s: %w", i.Name, template, err)
		if err := os.RemoveAll(i.DataDir); err != nil {
			return errors.Join(cpErr, err)
		}
		if err := os.Mkdir(i.DataDir, 0o750); err != nil {
			return errors.Join(cpErr, err)
		}
		if err := i.runInstallDB(); err != nil {
			return errors.Join(cpErr, err)
		}
	}
	return nil
}
