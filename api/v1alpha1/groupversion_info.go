package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of every Dolphin resource in this package.
var GroupVersion = schema.GroupVersion{Group: "mysql.dolphin.dev", Version: "v1alpha1"}

// localSchemeBuilder collects the generated conversion functions (zz_generated.conversion.go
// registers them from init), so that runtime.Scheme.Convert knows them too.
var localSchemeBuilder runtime.SchemeBuilder

// AddToScheme registers the types of this package, and their conversions to and from
// v1beta1, with a scheme. Each manager builds its own scheme and calls this explicitly (see
// cmd/dolphin).
func AddToScheme(s *runtime.Scheme) error {
	if err := localSchemeBuilder.AddToScheme(s); err != nil {
		return err
	}
	s.AddKnownTypes(GroupVersion, &MySQLCluster{}, &MySQLClusterList{}, &MySQLBackup{}, &MySQLBackupList{},
		&MySQLUser{}, &MySQLUserList{}, &MySQLDatabase{}, &MySQLDatabaseList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
