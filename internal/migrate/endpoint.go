package migrate

import (
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Describe names the endpoint for logs and markers, without its password: "user@host:port"
// or "user@socket".
func (e Endpoint) Describe() string {
	if e.Socket != "" {
		return e.User + "@" + e.Socket
	}
	return e.User + "@" + net.JoinHostPort(e.Host, strconv.Itoa(e.port()))
}

func (e Endpoint) port() int {
	if e.Port == 0 {
		return 3306
	}
	return e.Port
}

// Open returns a handle on the endpoint for Dolphin's own statements (Observe, CopyAccounts):
// TLS verified against CACertPEM or CAFile, the server's name included, when either is set.
func (e Endpoint) Open() (*sql.DB, error) {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd = e.User, e.Password
	if e.Socket != "" {
		cfg.Net, cfg.Addr = "unix", e.Socket
	} else {
		cfg.Net, cfg.Addr = "tcp", net.JoinHostPort(e.Host, strconv.Itoa(e.port()))
	}
	if e.CAFile != "" || len(e.CACertPEM) > 0 {
		pem := e.CACertPEM
		if len(pem) == 0 {
			var err error
			if pem, err = os.ReadFile(e.CAFile); err != nil {
				return nil, fmt.Errorf("reading the source's CA: %w", err)
			}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("the source's CA holds no PEM certificate")
		}
		cfg.TLS = &tls.Config{RootCAs: pool, ServerName: e.Host, MinVersion: tls.VersionTLS12}
	}
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = 10*time.Second, 10*time.Minute, time.Minute
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(2)
	return db, nil
}
