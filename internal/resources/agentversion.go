package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// The instance pods run an agent copied from the operator's own image (AgentImage), the one
// part of their template that depends on the operator's version rather than on the cluster's
// spec and engine version. A new operator release must not restart every database for it:
// the StatefulSet keeps the agent image its pods run until they restart for a reason of their
// own (a template change the spec implies), or until their agent is too old for this operator
// (AgentProtocol). Both facts are recorded on the StatefulSet, not its pod template, so that
// recording them restarts nothing. docs/design/0034.
const (
	// SpecTemplateHashAnnotation is a hash of the pod template as the spec and the engine
	// version imply it, the agent image left out.
	SpecTemplateHashAnnotation = "mysql.dolphin.dev/spec-template-hash"
	// AgentProtocolAnnotation is the agent protocol of the image in the pod template (1 when
	// absent: StatefulSets written before the annotation existed).
	AgentProtocolAnnotation = "mysql.dolphin.dev/agent-protocol"
)

// AgentProtocol is the operator–agent protocol of this build. Bump it, and MinAgentProtocol
// with it, when an agent of an earlier build can no longer serve this operator: pods then
// restart onto the new agent, one at a time, as for any template change.
const AgentProtocol = 1

// MinAgentProtocol is the oldest agent protocol this operator works with.
const MinAgentProtocol = 1

// agentImagePlaceholder stands for the agent image in SpecTemplateHash.
const agentImagePlaceholder = "agent"

// SpecTemplateHash is a hash of c's pod template with the agent image left out.
func SpecTemplateHash(c *dolphinv1.MySQLCluster) (string, error) {
	pod, err := podTemplate(c, BuildOptions{AgentImage: agentImagePlaceholder})
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(pod)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}

// AgentBuild decides the options a cluster's StatefulSet is built with, given the live one
// (nil when it does not exist yet), and the annotations to record on it. The pods keep the
// agent image they run while their spec-implied template is unchanged and their agent's
// protocol is supported; otherwise — the pods restart anyway, or must — the operator's image.
func AgentBuild(c *dolphinv1.MySQLCluster, live *appsv1.StatefulSet, o BuildOptions) (BuildOptions, map[string]string, error) {
	hash, err := SpecTemplateHash(c)
	if err != nil {
		return o, nil, err
	}
	annotations := map[string]string{SpecTemplateHashAnnotation: hash, AgentProtocolAnnotation: strconv.Itoa(AgentProtocol)}
	if live == nil {
		return o, annotations, nil
	}
	liveImage := ""
	for _, ic := range live.Spec.Template.Spec.InitContainers {
		if ic.Name == ContainerAgentTools {
			liveImage = ic.Image
		}
	}
	ours := o.AgentImage
	if ours == "" {
		ours = DefaultAgentImage
	}
	if liveImage == "" || liveImage == ours {
		return o, annotations, nil
	}
	protocol := 1
	if v, ok := live.Annotations[AgentProtocolAnnotation]; ok {
		if protocol, err = strconv.Atoi(v); err != nil {
			protocol = 0 // unreadable: treat as too old
		}
	}
	recorded, known := live.Annotations[SpecTemplateHashAnnotation]
	if protocol >= MinAgentProtocol && (!known || recorded == hash) {
		// Nothing else would change in the template (or, written before the hash was
		// recorded, nothing is known to): keep the running agent.
		kept := o
		kept.AgentImage = liveImage
		annotations[AgentProtocolAnnotation] = strconv.Itoa(protocol)
		return kept, annotations, nil
	}
	return o, annotations, nil
}
