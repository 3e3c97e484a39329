package controller

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

func privs(p ...string) []dolphinv1.Privilege {
	out := make([]dolphinv1.Privilege, len(p))
	for i, x := range p {
		out[i] = dolphinv1.Privilege(x)
	}
	return out
}

// TestEnvtestInvalidUsersAndDatabasesAreRejected sends each invalid MySQLUser and
// MySQLDatabase to the real API server and checks the message says what to change; the valid
// ones next to them are accepted (so the rules are not simply rejecting everything).
func TestEnvtestInvalidUsersAndDatabasesAreRejected(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ns := newNamespace(t)
	ctx := context.Background()
	user := func(name string, spec dolphinv1.MySQLUserSpec) client.Object {
		if spec.Cluster == "" {
			spec.Cluster = "shop"
		}
		return &dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	}
	db := func(name string, spec dolphinv1.MySQLDatabaseSpec) client.Object {
		if spec.Cluster == "" {
			spec.Cluster = "shop"
		}
		return &dolphinv1.MySQLDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	}
	grant := func(g ...dolphinv1.Grant) dolphinv1.MySQLUserSpec { return dolphinv1.MySQLUserSpec{Grants: g} }
	for _, tc := range []struct {
		name    string
		obj     client.Object
		message string // "" = accepted
	}{
		{"valid user", user("u-ok", grant(dolphinv1.Grant{Privileges: privs("SELECT", "INSERT"), Database: "shop"},
			dolphinv1.Grant{Privileges: privs("ALL"), Database: "shop", Table: "orders", GrantOption: true},
			dolphinv1.Grant{Privileges: privs("PROCESS", "REPLICATION CLIENT"), Database: "*"})), ""},
		{"reserved user name", user("u-res", dolphinv1.MySQLUserSpec{Name: "dolphin-schema"}), "reserved for the server or for Dolphin's own accounts"},
		{"root", user("root", dolphinv1.MySQLUserSpec{}), "metadata.name cannot be the user name"},
		{"quote in user name", user("u-q", dolphinv1.MySQLUserSpec{Name: "a'b"}), "spec.name in body should match"},
		{"bad host", user("u-h", dolphinv1.MySQLUserSpec{Host: "10.0.0.1' OR 1"}), "spec.host in body should match"},
		{"unknown privilege", user("u-p", grant(dolphinv1.Grant{Privileges: privs("SUPER"), Database: "*"})), `Unsupported value: "SUPER"`},
		{"read_only bypass", user("u-ro", grant(dolphinv1.Grant{Privileges: privs("READ_ONLY ADMIN"), Database: "*"})), `Unsupported value: "READ_ONLY ADMIN"`},
		{"ALL on every database", user("u-all", grant(dolphinv1.Grant{Privileges: privs("ALL PRIVILEGES"), Database: "*"})), "ALL PRIVILEGES on every database would include administrative privileges"},
		{"global privilege on a database", user("u-g", grant(dolphinv1.Grant{Privileges: privs("PROCESS"), Database: "shop"})), "are global: grant them on database '*'"},
		{"database privilege on a table", user("u-t", grant(dolphinv1.Grant{Privileges: privs("EXECUTE"), Database: "shop", Table: "t"})), "only table privileges"},
		{"ALL with others", user("u-a2", grant(dolphinv1.Grant{Privileges: privs("ALL", "SELECT"), Database: "shop"})), "list it alone"},
		{"table on every database", user("u-st", grant(dolphinv1.Grant{Privileges: privs("SELECT"), Database: "*", Table: "t"})), "covers every table"},
		{"two grants on one scope", user("u-dup", grant(dolphinv1.Grant{Privileges: privs("SELECT"), Database: "shop"},
			dolphinv1.Grant{Privileges: privs("INSERT"), Database: "shop"})), "each database and table may appear in one grant only"},
		{"wildcard database", user("u-w", grant(dolphinv1.Grant{Privileges: privs("SELECT"), Database: "shop%"})), "spec.grants[0].database in body should match"},
		{"no privileges", user("u-np", grant(dolphinv1.Grant{Privileges: privs(), Database: "shop"})), "spec.grants[0].privileges in body should have at least 1 items"},
		{"unknown TLS requirement", user("u-tls", dolphinv1.MySQLUserSpec{Require: "CIPHER"}), `supported values: "None", "SSL", "X509"`},
		{"negative limit", user("u-lim", dolphinv1.MySQLUserSpec{MaxUserConnections: -1}), "maxUserConnections in body should be greater than or equal to 0"},
		{"write on every database", user("u-w-all", grant(dolphinv1.Grant{Privileges: privs("SELECT", "INSERT"), Database: "*"})), "only reading and monitoring privileges are offered"},
		{"the mysql database", user("u-mysql", grant(dolphinv1.Grant{Privileges: privs("SELECT"), Database: "mysql"})), "the server's own databases"},
		{"a server account by metadata.name", user("mariadb.sys", dolphinv1.MySQLUserSpec{}), "metadata.name cannot be the user name"},
		{"upper-case host", user("u-uh", dolphinv1.MySQLUserSpec{Host: "MyHost"}), "spec.host in body should match"},
		{"valid database", db("d-ok", dolphinv1.MySQLDatabaseSpec{CharacterSet: "utf8mb4", Collation: "utf8mb4_unicode_ci"}), ""},
		{"binary collation", db("d-bin", dolphinv1.MySQLDatabaseSpec{CharacterSet: "binary", Collation: "binary"}), ""},
		{"utf8mb3 with a utf8 collation", db("d-u3", dolphinv1.MySQLDatabaseSpec{CharacterSet: "utf8mb3", Collation: "utf8_general_ci"}), ""},
		{"the mysql database by spec.name", db("d-sys", dolphinv1.MySQLDatabaseSpec{Name: "mysql"}), "the server's own databases"},
		{"the sys database by metadata.name", db("sys", dolphinv1.MySQLDatabaseSpec{}), "metadata.name cannot be the database name"},
		{"dotted database name", db("d.x", dolphinv1.MySQLDatabaseSpec{}), "metadata.name cannot be the database name"},
		{"collation of another charset", db("d-co", dolphinv1.MySQLDatabaseSpec{CharacterSet: "latin1", Collation: "utf8mb4_bin"}), "collation must belong to characterSet"},
		{"SQL in the charset", db("d-cs", dolphinv1.MySQLDatabaseSpec{CharacterSet: "utf8; DROP"}), "spec.characterSet in body should match"},
		{"unknown cleanup policy", db("d-cp", dolphinv1.MySQLDatabaseSpec{CleanupPolicy: "Orphan"}), `supported values: "Delete", "Retain"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Create(ctx, tc.obj)
			switch {
			case tc.message == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tc.message == "":
			case err == nil:
				t.Fatalf("accepted; want rejection with %q", tc.message)
			case !strings.Contains(err.Error(), tc.message):
				t.Errorf("rejected with\n  %v\nwant a message containing\n  %q", err, tc.message)
			}
		})
	}

	// Defaults, as kubectl explain documents them.
	var u dolphinv1.MySQLUser
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "u-ok"}, &u); err != nil {
		t.Fatal(err)
	}
	if u.Spec.Host != "%" || u.Spec.CleanupPolicy != dolphinv1.CleanupDelete || u.Spec.Require != dolphinv1.RequireNone || u.Spec.Grants[0].Table != "*" {
		t.Errorf("user defaults: host %q cleanupPolicy %q require %q table %q", u.Spec.Host, u.Spec.CleanupPolicy, u.Spec.Require, u.Spec.Grants[0].Table)
	}
	var d dolphinv1.MySQLDatabase
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "d-ok"}, &d); err != nil {
		t.Fatal(err)
	}
	if d.Spec.CleanupPolicy != dolphinv1.CleanupRetain {
		t.Errorf("database cleanupPolicy defaults to %q, want Retain", d.Spec.CleanupPolicy)
	}

	// Identity fields cannot change.
	for _, tc := range []struct {
		name    string
		mutate  func()
		obj     client.Object
		message string
	}{
		{"user cluster", func() { u.Spec.Cluster = "other" }, &u, "spec.cluster is immutable"},
		{"user host", func() { u.Spec.Host = "10.0.0.%" }, &u, "spec.host is immutable"},
		{"user name set later", func() { u.Spec.Name = "someone" }, &u, "spec.name is immutable"},
		{"database name set later", func() { d.Spec.Name = "other" }, &d, "spec.name is immutable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(tc.obj), tc.obj); err != nil {
				t.Fatal(err)
			}
			tc.mutate()
			err := c.Update(ctx, tc.obj)
			if err == nil || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("update: %v, want %q", err, tc.message)
			}
		})
	}
	// Grants, limits and the TLS requirement can change.
	if err := c.Get(ctx, client.ObjectKeyFromObject(&u), &u); err != nil {
		t.Fatal(err)
	}
	u.Spec.Grants = u.Spec.Grants[:1]
	u.Spec.MaxUserConnections = 7
	if err := c.Update(ctx, &u); err != nil {
		t.Errorf("changing grants and the limit: %v", err)
	}
}
