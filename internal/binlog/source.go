package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
)

// sourceProbeTimeout bounds each candidate's probe in FirstAnswering.
const sourceProbeTimeout = 3 * time.Second

// FirstAnswering returns a Source function for ArchiverOptions: at every (re)connect it asks
// the candidates in order with SELECT @@log_bin (as the endpoint's user, with a short
// timeout) and returns the first that answers with its binary log on.
//
// Give the replicas first and the primary last: a replica has only what it received, a
// primary's binary log can hold a tail no replica acknowledged, which a failover discards
// (see ArchiverOptions.Source). A Service address is probed as a whole: whichever replica
// answers behind it is as good as another, since all of them replicate the one primary. A
// TCP connect is not enough of a probe: a proxy can accept a connection it has no backend
// for.
func FirstAnswering(candidates ...Endpoint) func(context.Context) (Endpoint, error) {
	return func(ctx context.Context) (Endpoint, error) {
		if len(candidates) == 0 {
			return Endpoint{}, errors.New("no source to read the binary log from")
		}
		var errs []error
		for _, ep := range candidates {
			if err := probe(ctx, ep); err != nil {
				errs = append(errs, err)
				continue
			}
			return ep, nil
		}
		return Endpoint{}, fmt.Errorf("no source answers: %w", errors.Join(errs...))
	}
}

func probe(ctx context.Context, ep Endpoint) error {
	addr := net.JoinHostPort(ep.Host, strconv.Itoa(ep.Port))
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd = ep.User, ep.Password
	cfg.Net, cfg.Addr = "tcp", addr
	cfg.TLS = ep.TLS
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = sourceProbeTimeout, sourceProbeTimeout, sourceProbeTimeout
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	pctx, cancel := context.WithTimeout(ctx, sourceProbeTimeout)
	defer cancel()
	var logBin int
	if err := db.QueryRowContext(pctx, "SELECT @@log_bin").Scan(&logBin); err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	if logBin != 1 {
		return fmt.Errorf("%s: the binary log is off", addr)
	}
	return nil
}
