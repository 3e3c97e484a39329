package localcluster

import (
	"fmt"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ContextName is the cluster, user and context name in the kubeconfigs written here.
const ContextName = "dolphin-local"

// WriteKubeconfig writes a kubeconfig at path for server (https://127.0.0.1:<port>) that trusts
// the CA of p and authenticates with the certificate pair name (see PKI.CertKey). Certificates
// are embedded so the file can be copied elsewhere.
func WriteKubeconfig(path, server string, p *PKI, name string) error {
	ca, err := os.ReadFile(p.CACert())
	if err != nil {
		return fmt.Errorf("reading CA for %s: %w", path, err)
	}
	certPath, keyPath := p.CertKey(name)
	cert, err := os.ReadFile(certPath)
	if err != nil {
		return fmt.Errorf("reading client certificate for %s: %w", path, err)
	}
	key, err := os.ReadFile(keyPath)
	if err != nil {
		return fmt.Errorf("reading client key for %s: %w", path, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[ContextName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[ContextName] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts[ContextName] = &clientcmdapi.Context{Cluster: ContextName, AuthInfo: ContextName}
	cfg.CurrentContext = ContextName
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	// WriteToFile keeps an existing file's mode; the file holds a private key.
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("restricting %s: %w", path, err)
	}
	return nil
}
