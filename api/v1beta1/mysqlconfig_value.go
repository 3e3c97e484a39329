package v1beta1

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// UnmarshalJSON reads a setting written as a string or as a whole number (what YAML makes of
// `max_connections: 500`); a number keeps its text.
func (v *MySQLConfigValue) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return fmt.Errorf("a mysqlConfig value: %w", err)
	}
	switch t := x.(type) {
	case string:
		*v = MySQLConfigValue(t)
	case json.Number:
		*v = MySQLConfigValue(t.String())
	case nil:
		*v = ""
	default:
		return fmt.Errorf("a mysqlConfig value must be a string or a number, not %s", b)
	}
	return nil
}
