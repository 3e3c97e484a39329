// Package json stands in for github.com/goccy/go-json in Dolphin's build (a replace directive
// in Dolphin's go.mod): the only user of that module in Dolphin's dependencies is
// go-mysql's replication package, which calls Marshal to render MySQL's binary JSON column
// values, and goccy/go-json allocates, at init and whatever is used, tables sized by every
// type in the binary (6.6 MB of pointers the garbage collector scans, in the operator) and
// links about 3 MB of code. encoding/json renders the same values (it honours the
// json.Marshaler the decoded values implement). docs/design/0037.
package json

import "encoding/json"

// Marshal returns the JSON encoding of v, as encoding/json.Marshal does.
func Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal parses JSON-encoded data into v, as encoding/json.Unmarshal does.
func Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
