package imagebuild

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// MySQLUID is the uid and gid of the mysql user in the official MariaDB and MySQL images; the
// images built here use the same, so that one pod spec (fsGroup, runAsUser) fits both.
const MySQLUID = 999

// MariaDBSuite is a Debian release whose MariaDB packages make an image.
type MariaDBSuite struct {
	// Name is the Debian suite ("bookworm": MariaDB 10.11, "trixie": MariaDB 11.8).
	Name string
	// Mirror is the Debian mirror (default http://deb.debian.org/debian).
	Mirror string
	// SecurityMirror is the mirror of Debian's security archive (default
	// http://deb.debian.org/debian-security).
	SecurityMirror string
}

// mariaDBPackages are installed into the image: the server, its client tools (the
// mariadb-binlog of PITR and kept copies) and mariadb-backup (backups and clones).
var mariaDBPackages = []string{"mariadb-server", "mariadb-client", "mariadb-backup"}

// MariaDBRootFSArgs is mmdebstrap's command line that writes the root file system of a MariaDB
// image for suite to out (a tar): Debian's minbase, the mysql user created with uid and gid
// 999 before the packages (their scripts then keep it, as in the official image), an empty
// /var/lib/mysql (the package's own initialisation removed: Dolphin initialises the data
// directory itself; /run is left empty by mmdebstrap and is a volume in Dolphin's pods), no apt lists, caches, documentation or locales.
func MariaDBRootFSArgs(suite MariaDBSuite, out string) []string {
	mirror, security := suite.Mirror, suite.SecurityMirror
	if mirror == "" {
		mirror = "http://deb.debian.org/debian"
	}
	if security == "" {
		security = "http://deb.debian.org/debian-security"
	}
	uid := strconv.Itoa(MySQLUID)
	return []string{
		"--variant=minbase", "--mode=root", "--format=tar",
		"--include=" + strings.Join(mariaDBPackages, ","),
		"--essential-hook=echo 'mysql:x:" + uid + ":" + uid + ":MariaDB Server:/nonexistent:/bin/false' >> \"$1\"/etc/passwd",
		"--essential-hook=echo 'mysql:x:" + uid + ":' >> \"$1\"/etc/group",
		"--essential-hook=echo 'mysql:*:0:0:99999:7:::' >> \"$1\"/etc/shadow",
		"--customize-hook=rm -rf \"$1\"/var/lib/mysql \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/* \"$1\"/var/cache/debconf/*-old \"$1\"/var/log/*.log \"$1\"/var/log/apt \"$1\"/usr/share/doc \"$1\"/usr/share/man \"$1\"/usr/share/info \"$1\"/usr/share/locale",
		"--customize-hook=mkdir -p \"$1\"/var/lib/mysql && chown " + uid + ":" + uid + " \"$1\"/var/lib/mysql && chmod 0755 \"$1\"/var/lib/mysql",
		"--customize-hook=test \"$(chroot \"$1\" id -u mysql)\" = " + uid + " && test \"$(chroot \"$1\" id -g mysql)\" = " + uid,
		suite.Name, out,
		// The release with its point-release updates and security fixes, as the host's apt
		// has them (MariaDB's fixes reach Debian through the security archive).
		fmt.Sprintf("deb %s %s main", mirror, suite.Name),
		fmt.Sprintf("deb %s %s-updates main", mirror, suite.Name),
		fmt.Sprintf("deb %s %s-security main", security, suite.Name),
	}
}

// MariaDBRootFS runs mmdebstrap (as root) to write the root file system of suite to out, with
// every file time clamped to epoch (SOURCE_DATE_EPOCH). Its output goes to log.
func MariaDBRootFS(ctx context.Context, suite MariaDBSuite, out string, epoch time.Time, log io.Writer) error {
	cmd := exec.CommandContext(ctx, "mmdebstrap", MariaDBRootFSArgs(suite, out)...)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(epoch.Unix(), 10))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mmdebstrap %s (needs root and Debian's mmdebstrap; hack/node.sh installs it): %w", suite.Name, err)
	}
	return nil
}

// MariaDB makes an image of a root file system written by MariaDBRootFS: one layer, no
// entrypoint (the pod names /usr/sbin/mariadbd), mariadbd as the default command, like the
// official image without its entrypoint script.
func MariaDB(rootfs string, version string, created time.Time) (v1.Image, error) {
	l, err := tarball.LayerFromFile(rootfs)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", rootfs, err)
	}
	return Image([]v1.Layer{l}, Config{
		Cmd:     []string{"mariadbd"},
		Env:     []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "MARIADB_VERSION=" + version},
		Created: created,
		Labels: map[string]string{
			"org.opencontainers.image.title":   "mariadb",
			"org.opencontainers.image.version": version,
			"org.opencontainers.image.description": "MariaDB " + version +
				" from Debian's packages, laid out like docker.io/library/mariadb (built by Dolphin's make images)",
		},
	})
}

// debianVersion matches the upstream part of a Debian version: "1:10.11.19-0+deb12u1" → 10.11.19.
var debianVersion = regexp.MustCompile(`^(?:\d+:)?(\d+\.\d+\.\d+)`)

// PackageVersion reads the upstream version of pkg from the dpkg status file in a root file
// system tar.
func PackageVersion(rootfs io.Reader, pkg string) (string, error) {
	tr := tar.NewReader(rootfs)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", errors.New("the root file system has no var/lib/dpkg/status")
		}
		if err != nil {
			return "", fmt.Errorf("reading the root file system: %w", err)
		}
		if strings.TrimPrefix(h.Name, "./") != "var/lib/dpkg/status" {
			continue
		}
		return statusVersion(tr, pkg)
	}
}

// statusVersion finds pkg's Version in a dpkg status file.
func statusVersion(status io.Reader, pkg string) (string, error) {
	sc := bufio.NewScanner(status)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	in := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			in = false
		case strings.HasPrefix(line, "Package: "):
			in = strings.TrimPrefix(line, "Package: ") == pkg
		case in && strings.HasPrefix(line, "Version: "):
			m := debianVersion.FindStringSubmatch(strings.TrimPrefix(line, "Version: "))
			if m == nil {
				return "", fmt.Errorf("%s has version %q, not x.y.z", pkg, line)
			}
			return m[1], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading dpkg status: %w", err)
	}
	return "", fmt.Errorf("%s is not installed in the root file system", pkg)
}
