package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// A new operator release must not restart every database. Two parts of the pod template can
// change without the user asking: the agent image, copied from the operator's own image
// (AgentImage, docs/design/0034), and the template itself when a release builds it
// differently (TemplateGeneration, docs/design/0038). The StatefulSet keeps both — the agent
// image its pods run and the generation of its template — until its pods restart for a reason
// of their own (a template change the spec implies), or must (an agent too old for this
// operator, AgentProtocol). The facts are recorded on the StatefulSet, not its pod template,
// so that recording them restarts nothing.
const (
	// SpecTemplateHashAnnotation is a hash of the pod template as the spec and the engine
	// version imply it at the recorded template generation, the agent image left out.
	SpecTemplateHashAnnotation = "mysql.dolphin.dev/spec-template-hash"
	// AgentProtocolAnnotation is the agent protocol of the image in the pod template (1 when
	// absent: StatefulSets written before the annotation existed).
	AgentProtocolAnnotation = "mysql.dolphin.dev/agent-protocol"
	// TemplateGenerationAnnotation is the generation the pod template was built at (1 when
	// absent: StatefulSets written before generations existed).
	TemplateGenerationAnnotation = "mysql.dolphin.dev/template-generation"
)

// AgentProtocol is the operator–agent protocol of this build. Bump it, and MinAgentProtocol
// with it, when an agent of an earlier build can no longer serve this operator: pods then
// restart onto the new agent, one at a time, as for any template change.
//
//   - 1: backups, clones, seeding, reseed.
//   - 2: POST /v1/keep and /v1/gtid-state (kept copies before a re-clone, docs/design/0044).
//     An agent of protocol 1 answers 404: its instance is not re-cloned without a copy until
//     it runs a newer agent or a person consents (MinAgentProtocol stays 1: no restart).
//   - 3: POST /v1/release-stop (the preStop hold of template generation 4, docs/design/0051).
//     Pods of older generations have no hold; their agents' 404 counts as released.
const AgentProtocol = 3

// MinAgentProtocol is the oldest agent protocol this operator works with.
const MinAgentProtocol = 1

// Pod template generations. A generation's template, for a given spec, never changes once
// released (TestTemplateGenerationsAreFrozen): a StatefulSet that records it is rebuilt
// byte for byte. A release that builds pods differently adds a generation; existing pods get
// it when they restart anyway, new clusters at once.
const (
	// generationInitial is the template of every release before generations existed.
	generationInitial = 1
	// generationCrashOnStop runs the server of a MariaDB cluster of more than one instance
	// under crashOnStop, so that stopping its container crashes it (docs/design/0038).
	generationCrashOnStop = 2
	// generationCrashOnStopStatus fixes crashOnStop's exit status under a /bin/sh that is
	// bash: a stop signal arriving while the script waited again for the killed server could
	// leave bash's wait answering -1 (exit 255) instead of the server's 137. The server was
	// killed either way; only the status the container reports differs (docs/design/0038).
	generationCrashOnStopStatus = 3
	// generationHoldForSwitchover gives the server container of a cluster of more than one
	// instance a preStop hook that keeps the server running, when its pod is deleted or
	// evicted, until the operator has moved the primary role away and released it (or
	// holdForSwitchoverSeconds have passed): a drained primary is switched over, not failed
	// over (docs/design/0051).
	generationHoldForSwitchover = 4
	// generationQuickProbes probes every second instead of every 2 s (the server's startup
	// and readiness probes) and 5 s (the agent's readiness probe), with failure thresholds
	// that keep the time to "not ready" as it was: a new pod is Ready about a second after
	// its server answers instead of up to 5 s later (docs/design/0037, apply → Ready).
	generationQuickProbes = 5
	// generationSeedConfiguresInstance drops the init container that wrote the per-instance
	// config: the seed init container runs the same script first (--init-script). One
	// container start less per pod, ~1 s of a new instance's start on a busy node (issue 35,
	// apply → Ready).
	generationSeedConfiguresInstance = 6
	// generationStartupRefusal starts the server of a MariaDB cluster of more than one
	// instance refusing application logins until the topology engine confirms its role, or
	// for mycnf.StartupRefusalPeriod: a primary the kubelet restarted in place must not serve
	// the reads of a kube-proxy that still sends it the primary Service's clients.
	generationStartupRefusal = 7
)

// TemplateGeneration is the newest pod template generation this build makes. Dolphin's own
// deletion of a replaced primary's pod releases the hold of generation 4 first
// (clustermanager.Manager.ReleaseStop), so that server still stops at once.
const TemplateGeneration = generationStartupRefusal

// agentImagePlaceholder stands for the agent image in SpecTemplateHash.
const agentImagePlaceholder = "agent"

// SpecTemplateHash is a hash of c's pod template at generation, the agent image left out.
func SpecTemplateHash(c *dolphinv1.MySQLCluster, generation int) (string, error) {
	pod, err := podTemplate(c, BuildOptions{AgentImage: agentImagePlaceholder, TemplateGeneration: generation})
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(pod)
	if err != nil {
		return "", fmt.Errorf("encoding the pod template: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}

// ChooseBuild decides the options a cluster's StatefulSet is built with, given the live one
// (nil when it does not exist yet) and the operator's options o, and the annotations to record
// on it. The pods keep the template generation and the agent image they run while the pod
// template their spec implies at that generation is unchanged and their agent's protocol is
// supported; otherwise — the pods restart anyway, or must — the newest generation (o's, when
// set) and the operator's image.
func ChooseBuild(c *dolphinv1.MySQLCluster, live *appsv1.StatefulSet, o BuildOptions) (BuildOptions, map[string]string, error) {
	newest := o
	newest.TemplateGeneration = o.generation()
	fresh := func() (BuildOptions, map[string]string, error) {
		hash, err := SpecTemplateHash(c, newest.TemplateGeneration)
		if err != nil {
			return o, nil, err
		}
		return newest, buildAnnotations(hash, newest.TemplateGeneration, AgentProtocol), nil
	}
	if live == nil {
		return fresh()
	}
	generation, ok := liveGeneration(live, newest.TemplateGeneration)
	if !ok {
		// A generation this build cannot make (an operator downgraded after a newer one
		// wrote it): the pods get this build's newest, restarting.
		return fresh()
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
	keepAgent := liveImage != "" && liveImage != ours
	protocol := AgentProtocol
	if keepAgent {
		protocol = liveProtocol(live)
		if protocol < MinAgentProtocol {
			return fresh() // an agent too old for this operator: the pods must restart
		}
	}
	hash, err := SpecTemplateHash(c, generation)
	if err != nil {
		return o, nil, err
	}
	if recorded, known := live.Annotations[SpecTemplateHashAnnotation]; known && recorded != hash {
		return fresh() // the spec changes the template: the pods restart anyway
	}
	// Nothing would change in the template (or, written before the hash was recorded,
	// nothing is known to): keep what the pods run.
	kept := o
	kept.TemplateGeneration = generation
	if keepAgent {
		kept.AgentImage = liveImage
	}
	return kept, buildAnnotations(hash, generation, protocol), nil
}

// buildAnnotations are the StatefulSet annotations ChooseBuild records.
func buildAnnotations(hash string, generation, protocol int) map[string]string {
	return map[string]string{
		SpecTemplateHashAnnotation:   hash,
		TemplateGenerationAnnotation: strconv.Itoa(generation),
		AgentProtocolAnnotation:      strconv.Itoa(protocol),
	}
}

// liveGeneration is the template generation recorded on live (generationInitial when
// absent); false when it is unreadable or not one of 1..newest.
func liveGeneration(live *appsv1.StatefulSet, newest int) (int, bool) {
	v, ok := live.Annotations[TemplateGenerationAnnotation]
	if !ok {
		return generationInitial, true
	}
	g, err := strconv.Atoi(v)
	if err != nil || g < generationInitial || g > newest {
		return 0, false
	}
	return g, true
}

// liveProtocol is the agent protocol recorded on live (1 when absent, 0 when unreadable:
// too old).
func liveProtocol(live *appsv1.StatefulSet) int {
	v, ok := live.Annotations[AgentProtocolAnnotation]
	if !ok {
		return 1
	}
	p, err := strconv.Atoi(v)
	if err != nil {
		return 0
	}
	return p
}
