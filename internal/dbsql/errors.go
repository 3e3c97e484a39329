package dbsql

import (
	"errors"

	"github.com/go-sql-driver/mysql"
)

// errnoAccessDenied is ER_ACCESS_DENIED_ERROR.
const errnoAccessDenied = 1045

// errnoMasterInfo is ER_MASTER_INFO: the replica could not read its replication state (its
// master.info or relay log info, or a relay log they name).
const errnoMasterInfo = 1201

// isErrno reports whether err is the server's error number n.
func isErrno(err error, n uint16) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == n
}

// IsAccessDenied reports whether err is the server refusing the login (wrong user or
// password), as opposed to the server being unreachable.
func IsAccessDenied(err error) bool {
	return isErrno(err, errnoAccessDenied)
}
