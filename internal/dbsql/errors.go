package dbsql

import (
	"errors"

	"github.com/go-sql-driver/mysql"
)

// errnoAccessDenied is ER_ACCESS_DENIED_ERROR.
const errnoAccessDenied = 1045

// IsAccessDenied reports whether err is the server refusing the login (wrong user or
// password), as opposed to the server being unreachable.
func IsAccessDenied(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errnoAccessDenied
}
