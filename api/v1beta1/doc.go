// Package v1beta1 holds the API of Dolphin (group mysql.dolphin.dev).
//
// The doc comments on every field are what `kubectl explain mysqlcluster.spec…` shows users:
// write them for a platform engineer, not for the code reader.
//
// v1beta1 is the hub of conversion (every other version converts to and from it) and the
// version objects are stored in.
//
// MySQLCluster's spec.engine.version is a selectable field in v1beta1 only (`kubectl get myc
// --field-selector spec.engine.version=10.11` finds the clusters still to upgrade). It also
// keeps the two versions' selectable fields different, which the API server needs while their
// schemas differ (kubernetes/kubernetes#140689: identical selectable fields are hoisted to the
// top level of the CRD and then refused there).
//
// +kubebuilder:object:generate=true
// +groupName=mysql.dolphin.dev
package v1beta1
