// Package resources holds the pure builders that turn a MySQLCluster into the Kubernetes
// objects Dolphin owns: Secrets, ConfigMap, Services, StatefulSet, PodDisruptionBudget and
// ServiceAccount. Builders never talk to the API server; they return server-side-apply
// configurations (or, for the generated Secret, an object to create once) so that the
// reconciler can apply them under one field manager and skip applies that change nothing.
//
// Builders expect a cluster whose defaults are already set (see Defaulted).
package resources
