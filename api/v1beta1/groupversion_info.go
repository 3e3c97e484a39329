package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of every Dolphin resource in this package.
var GroupVersion = schema.GroupVersion{Group: "mysql.dolphin.dev", Version: "v1beta1"}

// AddToScheme registers the types of this package with a scheme. Each manager builds
// its own scheme and calls this explicitly (see cmd/dolphin).
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &MySQLCluster{}, &MySQLClusterList{}, &MySQLBackup{}, &MySQLBackupList{},
		&MySQLUser{}, &MySQLUserList{}, &MySQLDatabase{}, &MySQLDatabaseList{},
		&MySQLBackupStore{}, &MySQLBackupStoreList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
