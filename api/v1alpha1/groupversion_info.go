// Package v1alpha1 holds the MySQLCluster API of Dolphin (group mysql.dolphin.dev).
//
// The doc comments on every field are what `kubectl explain mysqlcluster.spec…` shows users:
// write them for a platform engineer, not for the code reader.
//
// +kubebuilder:object:generate=true
// +groupName=mysql.dolphin.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of every Dolphin resource in this package.
var GroupVersion = schema.GroupVersion{Group: "mysql.dolphin.dev", Version: "v1alpha1"}

// AddToScheme registers the types of this package with a scheme. Each manager builds
// its own scheme and calls this explicitly (see cmd/dolphin).
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &MySQLCluster{}, &MySQLClusterList{}, &MySQLBackup{}, &MySQLBackupList{},
		&MySQLUser{}, &MySQLUserList{}, &MySQLDatabase{}, &MySQLDatabaseList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
