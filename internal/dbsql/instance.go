package dbsql

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
)

const (
	defaultConnectTimeout = 3 * time.Second
	defaultQueryTimeout   = 10 * time.Second

	// A few connections per server are plenty: the topology engine runs one
	// observation or one step at a time per server.
	maxOpenConns    = 4
	maxIdleConns    = 2
	connMaxIdleTime = 2 * time.Minute
	connMaxLifetime = 30 * time.Minute
)

// execer is what statements run on: a *sql.DB, or a *sql.Conn when a sequence
// must stay on one session.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

var (
	_ execer = (*sql.DB)(nil)
	_ execer = (*sql.Conn)(nil)
)

// stmt is one statement with its arguments.
type stmt struct {
	query string
	args  []any
}

func st(query string, args ...any) stmt { return stmt{query: query, args: args} }

// instance implements Instance on a *sql.DB whose connections all run
// the dialect's session setup first.
type instance struct {
	db           *sql.DB
	d            *dialect
	queryTimeout time.Duration
}

var _ Instance = (*instance)(nil)

// Open returns an Instance for cfg. It does not touch the network: the first
// connection is made by the first method call.
func Open(cfg Config) (Instance, error) {
	d, err := dialectFor(cfg.Flavor)
	if err != nil {
		return nil, err
	}
	if cfg.Addr == "" {
		return nil, errors.New("dbsql: Config.Addr is empty")
	}
	mc := driverConfig(cfg)
	// Status reads everything in one round trip where the dialect has a probe of two
	// statements. Every statement an Instance sends is fixed text or has its arguments
	// quoted by the driver, so allowing several per call lets nothing in.
	mc.MultiStatements = d.statusProbe != ""
	base, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("dbsql: driver config for %s: %w", cfg.Addr, err)
	}
	return openConnector(base, d, cfg), nil
}

// driverConfig translates cfg into the go-sql-driver configuration.
func driverConfig(cfg Config) *mysql.Config {
	mc := mysql.NewConfig()
	mc.Net = "tcp"
	mc.Addr = cfg.Addr
	mc.User = cfg.User
	mc.Passwd = cfg.Password
	mc.Timeout = cfg.ConnectTimeout
	if mc.Timeout <= 0 {
		mc.Timeout = defaultConnectTimeout
	}
	mc.TLS = cfg.TLS
	// The driver quotes arguments itself, honoring NO_BACKSLASH_ESCAPES, so
	// passwords and names never need hand-made escaping, and statements that
	// cannot be prepared server-side (CHANGE MASTER TO) still take arguments.
	mc.InterpolateParams = true
	mc.Logger = nopLogger{}
	return mc
}

// openConnector builds the pool on any connector; tests pass a recording one.
func openConnector(base driver.Connector, d *dialect, cfg Config) *instance {
	db := sql.OpenDB(&sessionConnector{base: base, init: d.sessionInit})
	db.SetMaxOpenConns(maxOpenConns)
	db.SetMaxIdleConns(maxIdleConns)
	db.SetConnMaxIdleTime(connMaxIdleTime)
	db.SetConnMaxLifetime(connMaxLifetime)
	qt := cfg.QueryTimeout
	if qt <= 0 {
		qt = defaultQueryTimeout
	}
	return &instance{db: db, d: d, queryTimeout: qt}
}

type nopLogger struct{}

func (nopLogger) Print(...any) {}

// exec runs stmts in order on ex, each bounded by the query timeout.
func (in *instance) exec(ctx context.Context, ex execer, stmts ...stmt) error {
	for _, s := range stmts {
		qctx, cancel := context.WithTimeout(ctx, in.queryTimeout)
		_, err := ex.ExecContext(qctx, s.query, s.args...)
		cancel()
		if err != nil {
			return fmt.Errorf("dbsql: %s: %w", s.query, err)
		}
	}
	return nil
}

func sts(queries ...string) []stmt {
	out := make([]stmt, len(queries))
	for i, q := range queries {
		out[i] = st(q)
	}
	return out
}

// ConfigureReplication implements Instance.
func (in *instance) ConfigureReplication(ctx context.Context, src Source) error {
	if src.Host == "" || src.Port <= 0 || src.User == "" {
		return fmt.Errorf("dbsql: incomplete replication source %s:%d user %q", src.Host, src.Port, src.User)
	}
	// Every TLS setting is given each time: CHANGE MASTER keeps the ones it is not given, so
	// a source that stopped serving TLS would otherwise still be asked for it.
	useTLS, caFile, verifyName := 0, "", 0
	if t := src.TLS; t != nil {
		if t.CAFile == "" {
			return fmt.Errorf("dbsql: replication over TLS from %s:%d needs a CA file", src.Host, src.Port)
		}
		useTLS, caFile = 1, t.CAFile
		if t.VerifyName {
			verifyName = 1
		}
	}
	configure := []stmt{
		st(in.d.stopReplica),
		st(in.d.changeSource, src.Host, src.Port, src.User, src.Password, useTLS, caFile, verifyName),
		st(in.d.startReplica),
	}
	return in.discardingStaleRelayLogs(ctx, in.exec(ctx, in.db, configure...), configure...)
}

// discardingStaleRelayLogs runs stmts again after RESET SLAVE when err is error 1201 (the
// replica cannot read its relay log info, see StartReplication), and returns err otherwise.
func (in *instance) discardingStaleRelayLogs(ctx context.Context, err error, stmts ...stmt) error {
	if !isErrno(err, errnoMasterInfo) || in.d.resetReplica == "" {
		return err
	}
	if rerr := in.exec(ctx, in.db, append([]stmt{st(in.d.resetReplica)}, stmts...)...); rerr != nil {
		return errors.Join(err, fmt.Errorf("after discarding the relay logs: %w", rerr))
	}
	return nil
}

// StartReplication implements Instance. A replica killed while its applier moved between
// relay logs can restart with its relay log info naming a relay log it had purged (MariaDB
// writes that file from a buffer in memory): every START then fails with error 1201, "could
// not initialize master info structure". Replication runs by GTID (the position is in
// gtid_slave_pos, which commits with the data), so the relay logs hold nothing needed:
// RESET SLAVE discards them and their info file, keeping the source's connection settings,
// and the START that follows fetches what was not applied again from the source.
func (in *instance) StartReplication(ctx context.Context) error {
	start := st(in.d.startReplica)
	return in.discardingStaleRelayLogs(ctx, in.exec(ctx, in.db, start), start)
}

// StopReplicationIO implements Instance.
//
// Against a hung or cut-off source, a semi-sync receiver ends by connecting to its source to
// KILL its dump thread, and waits for that connection up to
// rpl_semi_sync_slave_kill_conn_timeout (set to 1 s, its floor, just before: 0 means no
// timeout). STOP SLAVE waits for the receiver to end, so it took 1.0 s — unless the signal
// STOP sends the receiver as it begins (SIGUSR1, installed without SA_RESTART) arrives while
// that connection waits, which fails it at once (EINTR): MariaDB 10.11 sql/slave.cc
// terminate_slave_thread, sql/semisync_slave.cc kill_connection; docs/design/0035. So the
// receivers are KILLed first (which shuts their socket to the source down at once: the fence
// itself), given receiverEndGrace to reach that connection, and only then STOPped.
func (in *instance) StopReplicationIO(ctx context.Context) error {
	if len(in.d.beforeStopIO) > 0 {
		if err := in.exec(ctx, in.db, sts(in.d.beforeStopIO...)...); err != nil {
			return err
		}
	}
	if in.d.receiverThreads != "" {
		killed, err := in.killReceivers(ctx)
		if err != nil {
			return err
		}
		if killed > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(receiverEndGrace):
			}
		}
	}
	return in.exec(ctx, in.db, st(in.d.stopReplicaIO))
}

// receiverEndGrace is the time a killed receiver is given to reach its last connection to the
// source before STOP signals it (StopReplicationIO).
const receiverEndGrace = 50 * time.Millisecond

// killReceivers kills the replication receiver threads (an unknown thread, one that ended
// meanwhile, is not an error) and says how many it killed.
func (in *instance) killReceivers(ctx context.Context) (int, error) {
	return in.killThreads(ctx, in.d.receiverThreads)
}

// killThreads kills the connections whose IDs query selects (column ID); one that ended
// meanwhile is not an error. It says how many it killed.
func (in *instance) killThreads(ctx context.Context, query string) (int, error) {
	rows, err := in.queryRows(ctx, query)
	if err != nil {
		return 0, err
	}
	killed := 0
	for _, r := range rows {
		id, err := strconv.ParseInt(r["ID"], 10, 64)
		if err != nil {
			return killed, fmt.Errorf("dbsql: thread id %q: %w", r["ID"], err)
		}
		err = in.exec(ctx, in.db, st(killConn, id))
		var me *mysql.MySQLError
		switch {
		case err == nil:
			killed++
		case !(errors.As(err, &me) && me.Number == errUnknownThread):
			return killed, err
		}
	}
	return killed, nil
}

// StopReplication implements Instance.
func (in *instance) StopReplication(ctx context.Context) error {
	return in.exec(ctx, in.db, st(in.d.stopReplica))
}

// ResetReplication implements Instance.
func (in *instance) ResetReplication(ctx context.Context) error {
	return in.exec(ctx, in.db, st(in.d.stopReplica), st(in.d.resetReplicaAll))
}

// SetReadOnly implements Instance.
func (in *instance) SetReadOnly(ctx context.Context, readOnly bool) error {
	if readOnly {
		return in.exec(ctx, in.db, sts(in.d.readOnlyOn...)...)
	}
	return in.exec(ctx, in.db, sts(in.d.readOnlyOff...)...)
}

// SetSemiSyncSource implements Instance.
func (in *instance) SetSemiSyncSource(ctx context.Context, enabled bool) error {
	return in.exec(ctx, in.db, st("SET GLOBAL "+in.d.semiSync.sourceEnabled+"="+onOff(enabled)))
}

// RestartSemiSyncSource implements Instance.
func (in *instance) RestartSemiSyncSource(ctx context.Context, disconnectWaiting bool) error {
	if disconnectWaiting {
		if err := in.killWaitingForAck(ctx); err != nil {
			return err
		}
	}
	if err := in.SetSemiSyncSource(ctx, false); err != nil {
		return err
	}
	return in.SetSemiSyncSource(ctx, true)
}

// waitingForAck selects the connections whose transaction waits for a semi-sync
// acknowledgement.
const waitingForAck = "SELECT ID FROM information_schema.PROCESSLIST WHERE " + waitingForAckState

// killWaitingForAck closes the connections of transactions waiting for an acknowledgement.
// KILL CONNECTION, not KILL QUERY: a killed query is answered "committed" (measured on
// MariaDB 10.11.19, docs/research/semisync-required-mariadb.md), a closed connection is not.
func (in *instance) killWaitingForAck(ctx context.Context) error {
	_, err := in.killThreads(ctx, waitingForAck)
	return err
}

// SetSemiSyncTimeout implements Instance.
func (in *instance) SetSemiSyncTimeout(ctx context.Context, ms int64) error {
	return in.exec(ctx, in.db, st(fmt.Sprintf("SET GLOBAL %s=%d", in.d.semiSync.timeout, ms)))
}

// SetSemiSyncReplica implements Instance.
func (in *instance) SetSemiSyncReplica(ctx context.Context, enabled bool) error {
	return in.exec(ctx, in.db, st("SET GLOBAL "+in.d.semiSync.replicaEnabled+"="+onOff(enabled)))
}

// SetRequireSecureTransport implements Instance.
func (in *instance) SetRequireSecureTransport(ctx context.Context, on bool) error {
	return in.exec(ctx, in.db, st("SET GLOBAL require_secure_transport="+onOff(on)))
}

// ReloadTLS implements Instance.
func (in *instance) ReloadTLS(ctx context.Context) error {
	q := flushSSL
	if in.d.flavor == FlavorMySQL {
		q = "ALTER INSTANCE RELOAD TLS"
	}
	return in.exec(ctx, in.db, st(q))
}

// SeedGTIDForRejoin implements Instance.
func (in *instance) SeedGTIDForRejoin(ctx context.Context) error {
	return in.exec(ctx, in.db, sts(in.d.seedGTIDForRejoin...)...)
}

// WaitForGTID implements Instance.
func (in *instance) WaitForGTID(ctx context.Context, set GTIDSet, timeout time.Duration) error {
	if set == nil || set.IsEmpty() {
		return nil
	}
	if timeout <= 0 {
		return fmt.Errorf("dbsql: WaitForGTID needs a positive timeout, got %s", timeout)
	}
	if _, err := in.d.parseGTID(set.String()); err != nil {
		return fmt.Errorf("dbsql: WaitForGTID on %s: %w", in.d.flavor, err)
	}
	// The server stops waiting at timeout; the context only guards against a
	// server that never answers.
	wctx, cancel := context.WithTimeout(ctx, timeout+in.queryTimeout)
	defer cancel()
	var res sql.NullInt64
	err := in.db.QueryRowContext(wctx, in.d.waitForGTID, set.String(), in.d.waitTimeout(timeout)).Scan(&res)
	switch {
	case err != nil:
		return fmt.Errorf("dbsql: waiting for %s: %w", set, err)
	case !res.Valid:
		return fmt.Errorf("dbsql: waiting for %s: server returned NULL", set)
	case res.Int64 != 0:
		return fmt.Errorf("%w: %s not applied within %s", ErrWaitTimeout, set, timeout)
	}
	return nil
}

// Close implements Instance.
func (in *instance) Close() error {
	if err := in.db.Close(); err != nil {
		return fmt.Errorf("dbsql: close: %w", err)
	}
	return nil
}

// OpenReplicated returns a connection pool on cfg whose statements are written to the binary
// log like any client's (no sql_log_bin=0): for data that must replicate from the primary,
// such as application accounts and databases. Arguments are quoted by the driver.
func OpenReplicated(cfg Config) (*sql.DB, error) {
	if cfg.Addr == "" {
		return nil, errors.New("dbsql: Config.Addr is empty")
	}
	conn, err := mysql.NewConnector(driverConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("dbsql: driver config for %s: %w", cfg.Addr, err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(2)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(time.Minute)
	db.SetConnMaxLifetime(connMaxLifetime)
	return db, nil
}

// errCertificateSeen ends ServedCertificate's handshake once the certificate is recorded.
var errCertificateSeen = errors.New("certificate recorded; handshake stopped before any login")

// ServedCertificate connects to the server at cfg.Addr over TLS and returns the certificate it
// presents to a new connection, to tell whether it serves the current one. The certificate is
// not verified here, and so nothing follows it: the handshake is stopped as soon as the
// certificate is seen, before the login (cfg's credentials are never sent).
func ServedCertificate(ctx context.Context, cfg Config) (*x509.Certificate, error) {
	var served *x509.Certificate
	mc := driverConfig(cfg)
	mc.User, mc.Passwd = "dolphin-certificate-probe", ""
	mc.TLS = &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12, //nolint:gosec // compared, not trusted; no login follows
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) > 0 {
				served = cs.PeerCertificates[0]
			}
			return errCertificateSeen
		}}
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("dbsql: driver config for %s: %w", cfg.Addr, err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	err = db.PingContext(ctx)
	if served != nil {
		return served, nil
	}
	if err == nil {
		err = errors.New("no certificate presented")
	}
	return nil, fmt.Errorf("dbsql: TLS certificate of %s: %w", cfg.Addr, err)
}
