package restore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// ReseedMark is the content of ReseedMarker: why the operator discards the data, and the copy
// it kept first (docs/design/0044).
type ReseedMark struct {
	Reason string `json:"reason"`
	// Keep is the copy kept before the mark was written; nil when none was (nothing to keep
	// is a copy of 0 transactions; a re-clone without a copy was consented to).
	Keep *agent.ReseedKeep `json:"keep,omitempty"`
}

// Encode returns the marker's content: JSON when a copy is named, the reason alone
// otherwise (what agents before kept copies wrote).
func (m ReseedMark) Encode() []byte {
	if m.Keep == nil {
		return []byte(m.Reason + "\n")
	}
	b, _ := json.Marshal(m) // strings only: cannot fail
	return append(b, '\n')
}

// ParseReseedMark reads a marker's content: JSON, or a plain reason.
func ParseReseedMark(b []byte) ReseedMark {
	var m ReseedMark
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' && json.Unmarshal(t, &m) == nil {
		return m
	}
	return ReseedMark{Reason: strings.TrimSpace(string(b))}
}

// KeepAgain makes the copy of a re-seed mark once more, from the binary log files of the
// stopped server, just before its data directory is emptied: anything committed between the
// first copy and the server's stop (a write by an account read_only does not stop) is in the
// files now. A copy holding exactly the first one's transactions is removed again; one
// holding more is kept beside it as <name>-at-reseed, and said. An error means the data must
// not be discarded.
func KeepAgain(ctx context.Context, dataDir string, k agent.ReseedKeep, log func(string, ...any)) error {
	state, err := binlog.ParseServerState(k.PrimaryState)
	if err != nil {
		return fmt.Errorf("the mark's primary state: %w", err)
	}
	store, err := objectstore.NewDirectory(dataDir)
	if err != nil {
		return err
	}
	name := k.Name + "-at-reseed"
	cp, err := binlog.Keep(ctx, binlog.KeepOptions{
		BinlogIndex: filepath.Join(dataDir, BinlogIndex), Primary: state, Store: store, Prefix: KeptPrefix,
		Name: name, Instance: k.Instance, PrimaryName: k.Primary,
		Reason: "made again with the server stopped, just before the re-seed", ServerStopped: true,
	})
	if err != nil {
		return fmt.Errorf("keeping the transactions the primary lacks again, with the server stopped: %w", err)
	}
	if cp.GTIDs == k.GTIDs {
		if cp.Transactions > 0 {
			if err := store.Delete(ctx, KeptPrefix+name+".json", KeptPrefix+cp.Object); err != nil {
				return fmt.Errorf("removing the second copy, which holds what the first does: %w", err)
			}
		}
		log("the copy %s holds every transaction the primary lacks (%s)", k.Name, orNothing(k.GTIDs))
		return nil
	}
	log("transactions were committed after the copy %s was made (it holds %s): kept %d transactions (%s) as %s",
		k.Name, orNothing(k.GTIDs), cp.Transactions, cp.GTIDs, name)
	return nil
}

// BinlogIndex is the binary log index file in the data directory (mycnf's log_bin_index).
const BinlogIndex = "binlog.index"

func orNothing(s string) string {
	if s == "" {
		return "nothing"
	}
	return s
}
