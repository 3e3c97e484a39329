package controller

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// SecretAgentConnector reaches instance agents at their pod IP with the CA and token of the
// cluster's agent Secret. Clients are kept per pod address and Secret version, so polling a
// backup reuses one TLS connection.
type SecretAgentConnector struct {
	// Client reads the agent Secret (it is in the operator's cache).
	Client client.Reader

	mu      sync.Mutex
	clients map[string]*agent.Client
}

// Agent returns a client for pod's agent.
func (s *SecretAgentConnector) Agent(ctx context.Context, c *dolphinv1.MySQLCluster, pod *corev1.Pod) (InstanceAgent, error) {
	if pod.Status.PodIP == "" {
		return nil, fmt.Errorf("pod %s has no IP yet", pod.Name)
	}
	var sec corev1.Secret
	key := types.NamespacedName{Namespace: c.Namespace, Name: resources.AgentSecretName(c)}
	if err := s.Client.Get(ctx, key, &sec); err != nil {
		return nil, fmt.Errorf("reading the agent Secret %s: %w", key, err)
	}
	base := "https://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(resources.AgentPort))
	cacheKey := base + "|" + string(sec.UID) + "|" + sec.ResourceVersion
	s.mu.Lock()
	defer s.mu.Unlock()
	if cl, ok := s.clients[cacheKey]; ok {
		return cl, nil
	}
	cl, err := agent.NewClient(agent.ClientOptions{
		BaseURL:    base,
		Token:      string(sec.Data[resources.AgentTokenKey]),
		CACertPEM:  sec.Data[resources.AgentCAKey],
		ServerName: agent.AgentServerName(c.Name, c.Namespace),
	})
	if err != nil {
		return nil, fmt.Errorf("agent of %s: %w", pod.Name, err)
	}
	if s.clients == nil {
		s.clients = map[string]*agent.Client{}
	}
	// One client per pod address: drop the ones of older Secret versions.
	for k, old := range s.clients {
		if len(k) > len(base) && k[:len(base)+1] == base+"|" {
			old.CloseIdleConnections()
			delete(s.clients, k)
		}
	}
	s.clients[cacheKey] = cl
	return cl, nil
}
