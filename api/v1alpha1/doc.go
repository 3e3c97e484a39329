// Package v1alpha1 holds the API of Dolphin (group mysql.dolphin.dev).
//
// The doc comments on every field are what `kubectl explain mysqlcluster.spec…` shows users:
// write them for a platform engineer, not for the code reader.
//
// v1alpha1 is deprecated: v1beta1 is the hub and storage version. Every v1alpha1 kind converts
// to and from it (conversion.go by hand for the fields that moved, zz_generated.conversion.go
// by conversion-gen for the rest).
//
// +kubebuilder:object:generate=true
// +k8s:conversion-gen=github.com/dolphin-operator/dolphin/api/v1beta1
// +groupName=mysql.dolphin.dev
package v1alpha1
