package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/mycnf"
	"github.com/dolphin-operator/dolphin/internal/serverid"
)

// Keys of the cluster ConfigMap, mounted at mycnf.ConfigDir in every instance.
const (
	MyCnfKey     = "my.cnf"
	InitShKey    = "init.sh"
	InstallShKey = "install.sh"
)

// serverIDBase is added to the pod ordinal to form server_id (serverid.InstanceBase).
const serverIDBase = serverid.InstanceBase

// ConfigMap holds the generated my.cnf and the init script of the cluster. It fails when
// spec.mysqlConfig holds a key the API schema should have rejected.
func ConfigMap(c *dolphinv1.MySQLCluster) (*corev1ac.ConfigMapApplyConfiguration, error) {
	cnf, err := mycnf.Generate(mycnf.Input{Flavor: string(c.Spec.Engine.Flavor), Overrides: overrides(c), Comments: derivedComments(c)})
	if err != nil {
		return nil, fmt.Errorf("generating my.cnf: %w", err)
	}
	return corev1ac.ConfigMap(NamesFor(c).ConfigMap, c.Namespace).
		WithLabels(CommonLabels(c)).
		WithOwnerReferences(ownerReference(c)).
		WithData(map[string]string{MyCnfKey: cnf, InitShKey: InitScript(c), InstallShKey: InstallScript(c)}), nil
}

// InitScript is run by the seed init container of every instance (template generation 6 on;
// an init container of its own before) before the server starts. It writes the per-instance config (server_id from the pod ordinal, report_host). It never
// touches the data directory: the seed init container, which runs next, fills an empty one
// the way the operator tells it (InstallScript, a backup, or a clone of a peer).
func InitScript(c *dolphinv1.MySQLCluster) string {
	r := strings.NewReplacer(
		"@INSTANCE_CNF@", mycnf.InstanceConfigFile,
		"@SERVER_ID_BASE@", fmt.Sprint(serverIDBase),
		"@HEADLESS@", NamesFor(c).HeadlessService,
	)
	return r.Replace(initScriptTemplate)
}

// InstallScript initialises an empty data directory; the seed init container runs it when
// the operator says the instance starts empty (a new cluster, or MySQL, which is not cloned).
// It does nothing when the directory is initialised already and never deletes anything.
//
// The operator reaches instances over the network, where the install-time root account
// (localhost only) does not answer, so Dolphin's operator account is created while the data
// directory is initialised, by both flavors alike: ALL WITH GRANT OPTION, from '%', with the
// password of the credentials Secret; the engine creates the other accounts with it.
// MariaDB runs the statements in mariadb-install-db's bootstrap (--extra-file). MySQL runs them from
// --init-file during --initialize-insecure: the server executes that file after its own
// initialisation statements, with the server's default sql_mode (so backslash escapes
// hold whatever my.cnf says) and, unlike its own statements, binary logging on, which the
// file turns off for itself so that no instance starts with a GTID of its own. The MySQL
// script is tested as text only: no MySQL server can be installed here.
func InstallScript(c *dolphinv1.MySQLCluster) string {
	myCnf := path.Join(mycnf.ConfigDir, MyCnfKey)
	// The account's statements run in install-db's own bootstrap (--extra-file, after the
	// system tables), not in a second mariadbd --bootstrap: one InnoDB start-up less per
	// new instance (~0.7 s idle, more with three instances initialising on 2 cores).
	extraFile := "/tmp/dolphin-install.sql" // an emptyDir of the pod; the file holds the password, so 0600 and removed
	install := escapeOperatorPassword + "\n" +
		"  (umask 077 && " + operatorAccountSQL("FLUSH PRIVILEGES;") + " > " + extraFile + ")\n" +
		"  " + withoutFlushes + "mariadb-install-db --defaults-file=" + myCnf + " --auth-root-authentication-method=normal --skip-test-db --extra-file=" + extraFile +
		" || { rm -f " + extraFile + "; exit 1; }\n" +
		"  rm -f " + extraFile
	if c.Spec.Engine.Flavor == dolphinv1.FlavorMySQL {
		initFile := "/tmp/dolphin-init.sql" // an emptyDir of the pod; the file holds the password, so 0600 and removed
		install = escapeOperatorPassword + "\n" +
			"  (umask 077 && " + operatorAccountSQL("SET SESSION sql_log_bin = 0;") + " > " + initFile + ")\n" +
			"  " + withoutFlushes + "mysqld --defaults-file=" + myCnf + " --initialize-insecure --init-file=" + initFile +
			" || { rm -f " + initFile + "; exit 1; }\n" +
			"  rm -f " + initFile
	}
	r := strings.NewReplacer(
		"@DATADIR@", mycnf.DataDir,
		"@INSTALL@", install,
	)
	return r.Replace(installScriptTemplate)
}

// withoutFlushes runs the engine's initialisation through `dolphin nosync` when the seed
// names the binary in $DOLPHIN_NOSYNC (internal/nosync; seed.NosyncEnv) and the template's
// probe found it working, with its flushes otherwise. The script then makes the data directory
// durable in one syncfs before it writes the marker (installScriptTemplate). Three
// mariadb-install-db at once on a 2-core node: ~3.9 s with their ~1,000 flushes each, ~1.5 s
// without and one syncfs (docs/design/0065).
const withoutFlushes = "initialise "

// escapeOperatorPassword sets $pw to $DOLPHIN_OPERATOR_PASSWORD as the content of an SQL
// string literal: backslashes and quotes doubled, newlines written \n so that no statement
// spans lines. The dot appended and removed keeps trailing newlines, which $(...) would
// strip (a Secret made with --from-file often ends with one).
const escapeOperatorPassword = `pw=$(printf '%s.' "$DOLPHIN_OPERATOR_PASSWORD" | sed -e ':a' -e '$!N' -e '$!ba' -e 's/\\/\\\\/g' -e "s/'/''/g" -e 's/\n/\\n/g')` +
	"\n  pw=${pw%.}"

// operatorAccountSQL is a printf command writing first (one statement) and the statements
// that create Dolphin's operator account with the password $pw.
func operatorAccountSQL(first string) string {
	return `printf "` + first + `\nCREATE USER IF NOT EXISTS '%s'@'%%' IDENTIFIED BY '%s';\nGRANT ALL PRIVILEGES ON *.* TO '%s'@'%%' WITH GRANT OPTION;\n" \` +
		"\n    \"$DOLPHIN_OPERATOR_USER\" \"$pw\" \"$DOLPHIN_OPERATOR_USER\""
}

const initScriptTemplate = `#!/bin/sh
# Generated by Dolphin; do not edit. Writes the per-instance config before the server starts.
set -eu
ordinal="${POD_NAME##*-}"
case "$ordinal" in
  ''|*[!0-9]*) echo "dolphin-init: cannot derive an ordinal from POD_NAME=$POD_NAME" >&2; exit 1 ;;
esac
cat > @INSTANCE_CNF@ <<EOF
[mysqld]
server_id=$((@SERVER_ID_BASE@ + ordinal))
report_host=$POD_NAME.@HEADLESS@.$POD_NAMESPACE.svc
EOF
echo "dolphin-init: instance $ordinal configured"
`

const installScriptTemplate = `#!/bin/sh
# Generated by Dolphin; do not edit. Initialises an empty data directory (the seed init
# container runs it when the operator says the instance starts empty).
set -eu
if [ ! -e @DATADIR@/.dolphin-initialized ]; then
  echo "dolphin-install: initialising the data directory @DATADIR@"
  # The initialisation skips its flushes when the seed offers "$DOLPHIN_NOSYNC" nosync and
  # both it and this image's sync -f (syncfs) work here; otherwise it flushes as usual.
  nosync=
  if [ -n "${DOLPHIN_NOSYNC:-}" ] && "$DOLPHIN_NOSYNC" nosync -- sync -f @DATADIR@ 2>/dev/null; then
    nosync=1
  fi
  initialise() {
    if [ -n "$nosync" ]; then "$DOLPHIN_NOSYNC" nosync -- "$@"; else "$@"; fi
  }
  @INSTALL@
  if [ -n "$nosync" ]; then
    # Durable before the marker says so; an error stops here. A crash before this leaves no
    # marker, and the seed clears the directory and starts again.
    sync -f @DATADIR@
  fi
  touch @DATADIR@/.dolphin-initialized
  sync @DATADIR@/.dolphin-initialized @DATADIR@ 2>/dev/null || sync
fi
`

// ConfigHash identifies the spec fields whose change needs the instances restarted: the
// engine and the spec.mysqlConfig settings the server cannot take at run time (settings it
// can are applied with SET GLOBAL by the topology engine; see variables.go). It is
// put on the pod template, so a change of these fields rolls the pods — and nothing else
// does: a newer operator generating a slightly different my.cnf does not restart databases
// (the new file takes effect at the next restart).
func ConfigHash(c *dolphinv1.MySQLCluster) string {
	// encoding/json sorts map keys, so the hash is stable.
	b, err := json.Marshal(struct {
		Flavor  dolphinv1.Flavor                      `json:"flavor"`
		Version string                                `json:"version"`
		Config  map[string]dolphinv1.MySQLConfigValue `json:"config"`
	}{c.Spec.Engine.Flavor, c.Spec.Engine.Version, restartConfig(c)})
	if err != nil {
		panic(fmt.Sprintf("marshalling config hash input: %v", err)) // cannot happen for these types
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// overrides converts spec.mysqlConfig for the my.cnf generator, with the buffer pool sized
// from the server's memory limit when spec.mysqlConfig does not size it.
func overrides(c *dolphinv1.MySQLCluster) map[string]string {
	out := make(map[string]string, len(c.Spec.MySQLConfig)+1)
	for k, v := range c.Spec.MySQLConfig {
		out[k] = string(v)
	}
	if _, set := out[bufferPoolKey]; !set {
		if limit, ok := c.Spec.Resources.Limits[corev1.ResourceMemory]; ok {
			out[bufferPoolKey] = strconv.FormatInt(BufferPoolFor(limit.Value()), 10)
		}
	}
	return out
}

const bufferPoolKey = "innodb_buffer_pool_size"

// derivedComments say in my.cnf where the settings Dolphin derives come from.
func derivedComments(c *dolphinv1.MySQLCluster) map[string]string {
	if _, set := c.Spec.MySQLConfig[bufferPoolKey]; set {
		return nil
	}
	if limit, ok := c.Spec.Resources.Limits[corev1.ResourceMemory]; ok {
		return map[string]string{bufferPoolKey: fmt.Sprintf("60%% of the server's memory limit (%s), in 128 MiB units; set it in spec.mysqlConfig to choose.", limit.String())}
	}
	return nil
}

// bufferPoolShare of the server container's memory limit goes to InnoDB's buffer pool when
// the user does not size it: the rest is for connections, sort and join buffers, the binary
// log cache and the server itself (Percona's operator takes 75% by default; the server
// container here also holds nothing else, but a busy server's per-connection memory is what
// gets a pod OOM-killed, docs/design/0055).
const bufferPoolShare = 0.6

// bufferPoolUnit is the buffer pool's allocation unit (innodb_buffer_pool_chunk_size's
// default): the server rounds the size to a multiple of it.
const bufferPoolUnit = 128 << 20

// BufferPoolFor is the buffer pool size, in bytes, for a server container limited to limit
// bytes: bufferPoolShare of it, rounded down to bufferPoolUnit, at least one unit.
func BufferPoolFor(limit int64) int64 {
	size := int64(float64(limit)*bufferPoolShare) / bufferPoolUnit * bufferPoolUnit
	return max(size, bufferPoolUnit)
}
