package mycnf

import (
	"fmt"
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
// the client tries again. Dolphin's accounts are exempt: the operator's and root by their
// privileges (init_connect does not run for CONNECTION ADMIN or SUPER), the replication,
// monitoring and schema accounts by name (names starting with "dolphin" are reserved for
// Dolphin: the MySQLUser API refuses them). GLOBAL_STATUS is readable by every account.
var StartupLoginRefusal = fmt.Sprintf("IF (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME') < %d "+
	"AND CURRENT_USER() NOT LIKE 'dolphin%%' "+
	"THEN SIGNAL SQLSTATE '08004' SET MESSAGE_TEXT = 'dolphin: this server started a moment ago and its role is not confirmed yet; connect again'; END IF",
	int(StartupRefusalPeriod.Seconds()))
