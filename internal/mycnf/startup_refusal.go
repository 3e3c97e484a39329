package mycnf

import (
	"fmt"
	"strings"
	"time"
)

// StartupRefusalPeriod is how long a server of a cluster of more than one instance refuses
// application logins after it starts, unless Dolphin confirms its role sooner (the topology
// engine lifts the refusal when it promotes the server or points it at its source).
//
// A primary killed and restarted in place by the kubelet keeps its pod and its address, and a
// kube-proxy that has not yet applied the failover that replaced it — its rules trail the
// EndpointSlice by up to its minSyncPeriod (1 s), more on a loaded node — still sends the
// primary Service's new connections there: its reads are older than what the new primary
// acknowledged (a chaos round read stale data there for 1.5 s after the move). The period
// covers the time until the engine sees the server (about one detection interval); it bounds
// the refusal when the operator is not running.
const StartupRefusalPeriod = 5 * time.Second

// StartupLoginRefusal is the init_connect a server of a cluster of more than one instance
// starts with (--init-connect): while its uptime is below StartupRefusalPeriod, an application
// login fails ("init_connect command failed"; the message is in the server's error log) and
// the client tries again. Accounts with CONNECTION ADMIN or SUPER — Dolphin's own — are not
// subject to init_connect. GLOBAL_STATUS is readable by every account.
var StartupLoginRefusal = fmt.Sprintf("IF (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME') < %d "+
	"THEN SIGNAL SQLSTATE '08004' SET MESSAGE_TEXT = 'dolphin: this server started a moment ago and its role is not confirmed yet; connect again'; END IF",
	int(StartupRefusalPeriod.Seconds()))

// ConfiguresInitConnect reports whether settings (spec.mysqlConfig's names) set init_connect,
// whose value a start-up refusal must not replace.
func ConfiguresInitConnect(names []string) bool {
	for _, n := range names {
		if strings.ReplaceAll(strings.ToLower(n), "-", "_") == "init_connect" {
			return true
		}
	}
	return false
}
