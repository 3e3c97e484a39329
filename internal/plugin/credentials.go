package plugin

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// account is what a client needs to log in.
type account struct {
	User, Password, Host string
	Port                 int
}

func newCredentialsCmd(e *env) *cobra.Command {
	var root bool
	cmd := &cobra.Command{
		Use:   "credentials CLUSTER [USER]",
		Short: "List a cluster's accounts, or print one's user, password, host and port",
		Long: "Without USER, list the accounts declared for the cluster (MySQLUsers) and where their\n" +
			"passwords are. With USER (the account's name on the server), print what a client needs.\n" +
			"--root prints the root account's instead (for emergencies: applications use their own).",
		Args: cobra.RangeArgs(1, 2),
		RunE: e.onCluster(func(ctx context.Context, mc *dolphinv1.MySQLCluster, args []string) error {
			if !root && len(args) == 1 {
				return e.listAccounts(ctx, mc)
			}
			user := ""
			if len(args) == 2 {
				user = args[1]
			}
			a, err := e.account(ctx, mc, user, root)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.out, "user: %s\npassword: %s\nhost: %s\nport: %d\n", a.User, a.Password, a.Host, a.Port)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&root, "root", false, "The root account's credentials.")
	return cmd
}

// usersOf lists the cluster's MySQLUsers.
func (e *env) usersOf(ctx context.Context, mc *dolphinv1.MySQLCluster) ([]dolphinv1.MySQLUser, error) {
	var list dolphinv1.MySQLUserList
	if err := e.c.List(ctx, &list, client.InNamespace(mc.Namespace)); err != nil {
		return nil, fmt.Errorf("listing MySQLUsers: %w", err)
	}
	var out []dolphinv1.MySQLUser
	for _, u := range list.Items {
		if u.Spec.Cluster == mc.Name {
			out = append(out, u)
		}
	}
	return out, nil
}

func (e *env) listAccounts(ctx context.Context, mc *dolphinv1.MySQLCluster) error {
	users, err := e.usersOf(ctx, mc)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACCOUNT\tMYSQLUSER\tPASSWORD IN")
	for _, u := range users {
		s, k := userPasswordSecret(&u)
		host := u.Spec.Host
		if host == "" {
			host = "%"
		}
		fmt.Fprintf(tw, "%s@%s\t%s\tSecret %s, key %s\n", userName(&u), host, u.Name, s, k)
	}
	fmt.Fprintf(tw, "root@%%\t-\tSecret %s, key %s\n", credentialsSecret(mc), rootPasswordKey)
	return tw.Flush()
}

// account finds the credentials of user (its name on the server) or of root.
func (e *env) account(ctx context.Context, mc *dolphinv1.MySQLCluster, user string, root bool) (account, error) {
	host := fmt.Sprintf("%s.%s.svc", primaryService(mc), mc.Namespace)
	if root {
		pw, err := e.secretValue(ctx, mc.Namespace, credentialsSecret(mc), rootPasswordKey)
		return account{User: "root", Password: pw, Host: host, Port: mysqlPort}, err
	}
	users, err := e.usersOf(ctx, mc)
	if err != nil {
		return account{}, err
	}
	var names []string
	for _, u := range users {
		if userName(&u) == user || (user == "" && len(users) == 1) {
			s, k := userPasswordSecret(&u)
			pw, err := e.secretValue(ctx, mc.Namespace, s, k)
			return account{User: userName(&u), Password: pw, Host: host, Port: mysqlPort}, err
		}
		names = append(names, userName(&u))
	}
	if user == "" {
		return account{}, fmt.Errorf("%s has %d accounts (%v): name one, or use --root", mc.Name, len(users), names)
	}
	return account{}, fmt.Errorf("no MySQLUser of %s is named %q on the server (accounts: %v)", mc.Name, user, names)
}

// secretValue reads one key of a Secret.
func (e *env) secretValue(ctx context.Context, ns, name, key string) (string, error) {
	var s corev1.Secret
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		return "", fmt.Errorf("reading Secret %s/%s: %w", ns, name, err)
	}
	v, ok := s.Data[key]
	if !ok {
		return "", fmt.Errorf("Secret %s/%s has no key %q", ns, name, key)
	}
	return string(v), nil
}
