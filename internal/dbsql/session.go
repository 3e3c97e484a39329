package dbsql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
)

// sessionConnector wraps a driver.Connector so that every new connection
// runs init (SET SESSION sql_log_bin=0) before the pool hands it out. A
// connection whose init fails is closed and the error returned, so no
// statement ever runs with binary logging on.
type sessionConnector struct {
	base driver.Connector
	init []string
}

var _ driver.Connector = (*sessionConnector)(nil)

// Connect opens a connection and initializes its session.
func (c *sessionConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := conn.(driver.ExecerContext)
	if !ok {
		return nil, errors.Join(errors.New("dbsql: driver connection cannot execute statements"), conn.Close())
	}
	for _, q := range c.init {
		if _, err := ex.ExecContext(ctx, q, nil); err != nil {
			return nil, errors.Join(fmt.Errorf("dbsql: session setup %q: %w", q, err), conn.Close())
		}
	}
	return conn, nil
}

// Driver returns the wrapped connector's driver.
func (c *sessionConnector) Driver() driver.Driver { return c.base.Driver() }
