package topology

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/mycnf"
)

// A server of a cluster of more than one instance starts refusing application logins
// (template generation 7, mycnf.StartupLoginRefusal): the primary killed and restarted in place
// refuses them until the engine promotes it again, which ends the refusal at once; a replica
// that restarts refuses them until StartupRefusalPeriod of uptime, after which the engine
// takes the setting off. Dolphin's accounts are never refused: the operator's (privileges)
// and any named dolphin… (the replication, monitoring and schema accounts), even without a
// privilege.
func TestServerStartupRefusalEndsWithTheConfirmedRole(t *testing.T) {
	h := newHarness(t, 2)
	h.converge("two instances healthy", healthyWith("db-0"))
	h.createAppAccount()
	mustExec(t, h.sqlDB(0), "CREATE USER 'dolphin-probe'@'%' IDENTIFIED BY 'probe-pw'")
	startArgs := []string{"--init-rpl-role=SLAVE", "--init-connect=" + mycnf.StartupLoginRefusal}

	appLogin := func(i int) error { return h.login(i, appAccount.User, appAccount.Password) }
	uptime := h.uptime
	// refusedWhileStarting checks that an application login fails while the server is inside
	// its start-up period (a login after it can no longer be judged: logged, not failed).
	refusedWhileStarting := func(i int, what string) {
		err := appLogin(i)
		up := uptime(i)
		switch {
		case up >= mycnf.StartupRefusalPeriod:
			t.Logf("%s: uptime %s already past the start-up period when checked (a slow start); login error %v", what, up, err)
		case err == nil:
			t.Errorf("%s: an application login was taken %s after the server started", what, up)
		default:
			t.Logf("%s: application login refused at uptime %s: %v", what, up, err)
		}
	}

	// The primary killed and started again as its pod starts it.
	h.db.Instances[0].Kill(t)
	h.db.Instances[0].Start(t, startArgs...)
	refusedWhileStarting(0, "restarted primary")
	if err := h.login(0, "dolphin-probe", "probe-pw"); err != nil {
		t.Errorf("an account named dolphin… was refused by the start-up refusal: %v", err)
	}
	h.converge("db-0 the primary again", healthyWith("db-0"))
	if up := uptime(0); up >= mycnf.StartupRefusalPeriod {
		t.Logf("db-0 promoted again only at uptime %s: the refusal may have ended by itself", up)
	}
	if err := appLogin(0); err != nil {
		t.Errorf("the primary refuses application logins after its promotion: %v", err)
	}
	if v := h.globalString(0, "SHOW GLOBAL VARIABLES LIKE 'init_connect'"); v != "" {
		t.Errorf("init_connect of the promoted primary %q, want the default (empty)", v)
	}

	// A replica restarted: it replicates on its own, nothing lifts the refusal but time.
	h.db.Instances[1].Kill(t)
	h.db.Instances[1].Start(t, startArgs...)
	refusedWhileStarting(1, "restarted replica")
	deadline := time.Now().Add(mycnf.StartupRefusalPeriod + 10*time.Second)
	for appLogin(1) != nil && time.Now().Before(deadline) {
		h.e.Cycle(context.Background()) //nolint:errcheck // converging; judged below
		time.Sleep(200 * time.Millisecond)
	}
	if err := appLogin(1); err != nil {
		t.Errorf("the restarted replica still refuses application logins at uptime %s: %v", uptime(1), err)
	}
	// Past the period the engine takes the setting off (no query at every login any more).
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) &&
		h.globalString(1, "SHOW GLOBAL VARIABLES LIKE 'init_connect'") != ""; time.Sleep(200 * time.Millisecond) {
		h.e.Cycle(context.Background()) //nolint:errcheck // converging; judged below
	}
	if v := h.globalString(1, "SHOW GLOBAL VARIABLES LIKE 'init_connect'"); v != "" {
		t.Errorf("init_connect of the replica past its start-up period %q, want the default (empty)", v)
	}
	// Dolphin's own account was never refused: the engine observed and acted throughout.
	h.converge("healthy", healthyWith("db-0"))
}

// A primary killed and restarted in place after the failover — the engine reaches it only once
// it answers again, inside its start-up period — keeps refusing application logins until that
// period is over: the former primary's refusal (step 0) replaced the start-up one, and its end
// (step 1, formerPrimaryRefusal after the promotion) must give the start-up refusal back, not
// open the server. Before, a restarted former primary took logins ~1 s after its start, while a
// loaded node's kube-proxy still sent it clients of the primary Service (stale reads in the
// chaos suite, pod-delete-during-failover, 2026-12-07).
func TestServerRestartedFormerPrimaryKeepsItsStartupRefusal(t *testing.T) {
	h := newHarness(t, 2)
	h.converge("two instances healthy", healthyWith("db-0"))
	h.createAppAccount()
	startArgs := []string{"--init-rpl-role=SLAVE", "--init-connect=" + mycnf.StartupLoginRefusal}
	initConnect := func() string { return h.globalString(0, "SHOW GLOBAL VARIABLES LIKE 'init_connect'") }
	uptime := func() time.Duration { return h.uptime(0) }
	appLogin := func() error { return h.login(0, appAccount.User, appAccount.Password) }

	h.db.Instances[0].Kill(t)
	h.converge("failed over to db-1", func(d Decision) bool { return d.Primary == "db-1" && len(d.Plan) == 0 })
	h.db.Instances[0].Start(t, startArgs...)
	// The engine's cycles until the former primary's refusal is over (step 1).
	sawRefusal := false
	for deadline := time.Now().Add(formerPrimaryRefusal + 10*time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := h.e.Cycle(context.Background()); err != nil {
			t.Logf("cycle: %v", err)
		}
		v := initConnect()
		if v == refusedLogin {
			sawRefusal = true
			continue
		}
		if sawRefusal {
			break
		}
	}
	if !sawRefusal {
		t.Fatalf("the restarted former primary never got the former primary's refusal (init_connect %q)", initConnect())
	}
	v, up, loginErr := initConnect(), uptime(), appLogin()
	switch {
	case up >= mycnf.StartupRefusalPeriod:
		t.Logf("the former primary's refusal ended at uptime %s, past the start-up period: nothing to judge (init_connect %q)", up, v)
	case v != mycnf.StartupLoginRefusal:
		t.Errorf("the former primary's refusal ended at uptime %s with init_connect %q: want the start-up refusal back", up, v)
	case loginErr == nil:
		t.Errorf("an application login was taken at uptime %s, inside the start-up period", up)
	default:
		t.Logf("at uptime %s the former primary still refuses application logins (%v)", up, loginErr)
	}
	// Past the period the engine takes the start-up refusal off, and logins are taken.
	for deadline := time.Now().Add(mycnf.StartupRefusalPeriod + 10*time.Second); time.Now().Before(deadline) && initConnect() != ""; time.Sleep(200 * time.Millisecond) {
		h.e.Cycle(context.Background()) //nolint:errcheck // converging; judged below
	}
	if v := initConnect(); v != "" {
		t.Errorf("init_connect past the start-up period %q, want the default (empty)", v)
	}
	if err := appLogin(); err != nil {
		t.Errorf("the former primary refuses application logins past its start-up period: %v", err)
	}
}

// login opens a session on instance i as user and closes it: nil when the login was taken.
func (h *harness) login(i int, user, password string) error {
	h.t.Helper()
	db, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/?timeout=2s&readTimeout=5s",
		user, password, h.db.Instances[i].Addr()))
	if err != nil {
		h.t.Fatal(err)
	}
	defer db.Close()
	return db.PingContext(context.Background())
}

// uptime is instance i's Uptime status.
func (h *harness) uptime(i int) time.Duration {
	h.t.Helper()
	s := h.globalString(i, "SHOW GLOBAL STATUS LIKE 'Uptime'")
	n, err := strconv.Atoi(s)
	if err != nil {
		h.t.Fatalf("Uptime %q: %v", s, err)
	}
	return time.Duration(n) * time.Second
}
