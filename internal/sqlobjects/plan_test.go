package sqlobjects

import (
	"slices"
	"strings"
	"testing"
)

func statements(stmts []Statement) []string {
	out := make([]string, len(stmts))
	for i, s := range stmts {
		out[i] = s.String()
	}
	return out
}

func held(privs string, grantOption bool) Held {
	h := Held{Privileges: map[string]bool{}, GrantOption: grantOption}
	for _, p := range strings.Split(privs, ",") {
		if p != "" {
			h.Privileges[p] = true
		}
	}
	return h
}

func allHeld(f Flavor, l Level) Held {
	return held(strings.Join(allOf(f, l), ","), false)
}

func TestPlanUser(t *testing.T) {
	app := User{Name: "app", Host: "%", Password: "s3cret", Grants: []Grant{
		{Privileges: []string{"select", "INSERT"}, Database: "shop", Table: "*"},
	}}
	shop := Scope{Database: "shop", Table: "*"}
	for _, tc := range []struct {
		name        string
		want        User
		have        ObservedUser
		setPassword bool
		flavor      Flavor
		stmts       []string
	}{{
		name: "new account, with limits",
		want: User{Name: "app", Host: "10.0.0.%", Password: "pw", MaxUserConnections: 20, Require: "SSL",
			Grants: []Grant{{Privileges: []string{"SELECT"}, Database: "my_db"}, {Privileges: []string{"ALL"}, Database: "shop", Table: "orders", GrantOption: true}}},
		stmts: []string{
			"CREATE USER 'app'@'10.0.0.%' IDENTIFIED BY PASSWORD '<redacted>' REQUIRE SSL WITH MAX_USER_CONNECTIONS 20",
			"GRANT SELECT ON `my\\_db`.* TO 'app'@'10.0.0.%'",
			"GRANT ALL PRIVILEGES ON `shop`.`orders` TO 'app'@'10.0.0.%' WITH GRANT OPTION",
		},
	}, {
		name: "as declared: nothing to do",
		want: app,
		have: ObservedUser{Exists: true, Privileges: map[Scope]Held{shop: held("SELECT,INSERT", false)}},
	}, {
		name:  "a grant removed by hand comes back",
		want:  app,
		have:  ObservedUser{Exists: true, Privileges: map[Scope]Held{shop: held("SELECT", false)}},
		stmts: []string{"GRANT INSERT ON `shop`.* TO 'app'@'%'"},
	}, {
		name: "privileges no longer declared are revoked, everywhere",
		want: app,
		have: ObservedUser{Exists: true, Privileges: map[Scope]Held{
			{Database: "*", Table: "*"}:    held("PROCESS", false),
			shop:                           held("SELECT,INSERT,DELETE,UPDATE", true),
			{Database: "shop", Table: "t"}: held("SELECT", false),
			{Database: "shop_%", Table: "*", Pattern: true}: held("SELECT", false),
		}},
		stmts: []string{
			"REVOKE PROCESS ON *.* FROM 'app'@'%'",
			"REVOKE DELETE, UPDATE ON `shop`.* FROM 'app'@'%'",
			"REVOKE GRANT OPTION ON `shop`.* FROM 'app'@'%'",
			"REVOKE SELECT ON `shop_%`.* FROM 'app'@'%'",
			"REVOKE SELECT ON `shop`.`t` FROM 'app'@'%'",
		},
	}, {
		name:  "grant option alone",
		want:  User{Name: "app", Host: "%", Grants: []Grant{{Privileges: []string{"SELECT"}, Database: "shop", GrantOption: true}}},
		have:  ObservedUser{Exists: true, Privileges: map[Scope]Held{shop: held("SELECT", false)}},
		stmts: []string{"GRANT USAGE ON `shop`.* TO 'app'@'%' WITH GRANT OPTION"},
	}, {
		name:   "ALL PRIVILEGES held in full: nothing to do, nothing is extra",
		want:   User{Name: "app", Host: "%", Grants: []Grant{{Privileges: []string{"ALL PRIVILEGES"}, Database: "shop"}}},
		have:   ObservedUser{Exists: true, Privileges: map[Scope]Held{shop: allHeld(MariaDB, DatabaseLevel)}},
		flavor: MariaDB,
	}, {
		name:   "ALL PRIVILEGES with one missing is granted again",
		want:   User{Name: "app", Host: "%", Grants: []Grant{{Privileges: []string{"ALL"}, Database: "shop"}}},
		have:   ObservedUser{Exists: true, Privileges: map[Scope]Held{shop: held("SELECT,INSERT", false)}},
		flavor: MariaDB,
		stmts:  []string{"GRANT ALL PRIVILEGES ON `shop`.* TO 'app'@'%'"},
	}, {
		name:        "password, TLS requirement and limit in one ALTER USER",
		want:        User{Name: "app", Host: "%", Password: "new", MaxUserConnections: 5},
		have:        ObservedUser{Exists: true, Require: "SSL", MaxUserConnections: 0},
		setPassword: true,
		stmts:       []string{"ALTER USER 'app'@'%' IDENTIFIED BY PASSWORD '<redacted>' REQUIRE NONE WITH MAX_USER_CONNECTIONS 5"},
	}, {
		name:   "MariaDB reports REPLICATION CLIENT as BINLOG MONITOR",
		want:   User{Name: "cdc", Host: "%", Grants: []Grant{{Privileges: []string{"REPLICATION CLIENT", "REPLICATION SLAVE", "SELECT"}, Database: "*"}}},
		have:   ObservedUser{Exists: true, Privileges: map[Scope]Held{{Database: "*", Table: "*"}: held("BINLOG MONITOR,REPLICATION SLAVE,SELECT", false)}},
		flavor: MariaDB,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.flavor
			if f == "" {
				f = MariaDB
			}
			got := statements(PlanUser(f, tc.want, tc.have, tc.setPassword))
			if !slices.Equal(got, tc.stmts) {
				t.Errorf("plan:\n got %q\nwant %q", got, tc.stmts)
			}
		})
	}
}

func TestPlanUserNeverShowsThePassword(t *testing.T) {
	u := User{Name: "app", Host: "%", Password: "hunter2-secret"}
	for _, f := range []Flavor{MariaDB, MySQL} {
		for _, s := range append(PlanUser(f, u, ObservedUser{}, false), PlanUser(f, u, ObservedUser{Exists: true}, true)...) {
			if text := s.String(); strings.Contains(text, u.Password) || strings.Contains(text, nativePasswordHash(u.Password)) {
				t.Errorf("statement text shows the password or its hash: %s", s)
			}
			if !s.Secret {
				t.Errorf("statement not marked secret: %s", s)
			}
			// MariaDB binlogs the statement as typed: only the hash may be sent.
			for _, a := range s.Args {
				if f == MariaDB && a == u.Password {
					t.Errorf("MariaDB statement sends the clear-text password (binlogged as typed): %s", s.SQL)
				}
			}
		}
	}
}

func TestPasswordIsCurrent(t *testing.T) {
	// The stored form of 'pw' (measured on MariaDB 10.11: CREATE USER … IDENTIFIED BY 'pw').
	have := ObservedUser{Exists: true, Plugin: "mysql_native_password", AuthenticationString: "*D821809F681A40A6E379B50D0463EFAE20BDD122"}
	if cur, known := PasswordIsCurrent(have, "pw"); !cur || !known {
		t.Errorf("pw: current=%v known=%v, want true true", cur, known)
	}
	if cur, known := PasswordIsCurrent(have, "other"); cur || !known {
		t.Errorf("other: current=%v known=%v, want false true", cur, known)
	}
	if _, known := PasswordIsCurrent(ObservedUser{Exists: true, Plugin: "caching_sha2_password", AuthenticationString: "$A$005$x"}, "pw"); known {
		t.Error("a salted plugin's hash cannot be compared, but was")
	}
}

func TestPlanDatabase(t *testing.T) {
	for _, tc := range []struct {
		name  string
		want  Database
		have  ObservedDatabase
		stmts []string
	}{
		{"new, server defaults", Database{Name: "shop"}, ObservedDatabase{}, []string{"CREATE DATABASE `shop`"}},
		{"new, declared defaults", Database{Name: "a-b", CharacterSet: "utf8mb4", Collation: "utf8mb4_bin"}, ObservedDatabase{},
			[]string{"CREATE DATABASE `a-b` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"}},
		{"as declared", Database{Name: "shop", CharacterSet: "utf8mb4"}, ObservedDatabase{Exists: true, CharacterSet: "utf8mb4", Collation: "utf8mb4_general_ci"}, nil},
		{"utf8 is utf8mb3", Database{Name: "old", CharacterSet: "utf8", Collation: "utf8_bin"}, ObservedDatabase{Exists: true, CharacterSet: "utf8mb3", Collation: "utf8mb3_bin"}, nil},
		{"collation changed by hand", Database{Name: "shop", Collation: "utf8mb4_bin"}, ObservedDatabase{Exists: true, CharacterSet: "utf8mb4", Collation: "utf8mb4_general_ci"},
			[]string{"ALTER DATABASE `shop` COLLATE utf8mb4_bin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stmts, err := PlanDatabase(tc.want, tc.have)
			if err != nil {
				t.Fatal(err)
			}
			if got := statements(stmts); !slices.Equal(got, tc.stmts) {
				t.Errorf("plan:\n got %q\nwant %q", got, tc.stmts)
			}
		})
	}
	if _, err := PlanDatabase(Database{Name: "x", CharacterSet: "utf8; DROP"}, ObservedDatabase{}); err == nil {
		t.Error("a character set name with SQL in it was accepted")
	}
}

func TestDatabaseScope(t *testing.T) {
	for stored, want := range map[string]Scope{
		"shop":     {Database: "shop", Table: "*"},
		`my\_db`:   {Database: "my_db", Table: "*"},
		"my_db":    {Database: "my_db", Table: "*", Pattern: true},
		`shop\_%`:  {Database: `shop\_%`, Table: "*", Pattern: true},
		`100\%off`: {Database: "100%off", Table: "*"},
	} {
		if got := databaseScope(stored); got != want {
			t.Errorf("databaseScope(%q) = %+v, want %+v", stored, got, want)
		}
	}
}
