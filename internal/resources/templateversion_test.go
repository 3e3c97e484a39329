package resources

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/mycnf"
)

// liveStatefulSet is the StatefulSet the API server would hold after applying c built with
// o, and the annotations ChooseBuild gave.
func liveStatefulSet(t *testing.T, c *dolphinv1.MySQLCluster, o BuildOptions, annotations map[string]string) *appsv1.StatefulSet {
	t.Helper()
	ac, err := StatefulSet(c, o)
	if err != nil {
		t.Fatal(err)
	}
	ac.WithAnnotations(annotations)
	b, err := json.Marshal(ac)
	if err != nil {
		t.Fatal(err)
	}
	var sts appsv1.StatefulSet
	if err := json.Unmarshal(b, &sts); err != nil {
		t.Fatal(err)
	}
	return &sts
}

// templateJSON is the pod template c gets with o, as JSON.
func templateJSON(t *testing.T, c *dolphinv1.MySQLCluster, o BuildOptions) string {
	t.Helper()
	sts := liveStatefulSet(t, c, o, nil)
	b, err := json.Marshal(sts.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// supervised reports whether a pod template runs its server under crashOnStop.
func supervised(sts *appsv1.StatefulSet) bool {
	for _, ctr := range sts.Spec.Template.Spec.Containers {
		if ctr.Name == ContainerMySQLD {
			return slices.Contains(ctr.Command, crashOnStop) || slices.Contains(ctr.Command, crashOnStopGeneration2)
		}
	}
	return false
}

func TestChooseBuildKeepsWhatThePodsRunAcrossOperatorUpgrades(t *testing.T) {
	c := Defaulted(&dolphinv1.MySQLCluster{})
	c.Name, c.Namespace = "orders", "shop"
	v1 := BuildOptions{AgentImage: "dolphin:v1", TemplateGeneration: generationInitial} // the previous release
	v2 := BuildOptions{AgentImage: "dolphin:v2"}
	h1, err := SpecTemplateHash(c, generationInitial)
	if err != nil {
		t.Fatal(err)
	}
	h2, _ := SpecTemplateHash(c, generationCrashOnStop)
	hNewest, _ := SpecTemplateHash(c, TemplateGeneration)
	if h1 == h2 || h2 == hNewest {
		t.Fatalf("generations 1, 2 and %d of a 3-instance MariaDB cluster hash alike (%s, %s, %s)", TemplateGeneration, h1, h2, hNewest)
	}
	newestGeneration := strconv.Itoa(TemplateGeneration)
	// What the previous release wrote: the generation-1 template, no generation annotation.
	previous := liveStatefulSet(t, c, v1, map[string]string{SpecTemplateHashAnnotation: h1, AgentProtocolAnnotation: "1"})
	if supervised(previous) {
		t.Fatal("the generation-1 template runs the server under crashOnStop")
	}
	choose := func(c *dolphinv1.MySQLCluster, live *appsv1.StatefulSet, o BuildOptions) (BuildOptions, map[string]string) {
		t.Helper()
		got, ann, err := ChooseBuild(c, live, o)
		if err != nil {
			t.Fatal(err)
		}
		return got, ann
	}
	newest := BuildOptions{AgentImage: "dolphin:v2", TemplateGeneration: TemplateGeneration}

	t.Run("a new StatefulSet gets the newest generation and the operator's image", func(t *testing.T) {
		o, ann := choose(c, nil, v2)
		if o != newest || ann[SpecTemplateHashAnnotation] != hNewest || ann[TemplateGenerationAnnotation] != newestGeneration || ann[AgentProtocolAnnotation] != strconv.Itoa(AgentProtocol) {
			t.Errorf("got %+v %v; want %+v, hash %s, generation %s, protocol %d", o, ann, newest, hNewest, newestGeneration, AgentProtocol)
		}
	})
	t.Run("an operator upgrade alone keeps the template byte for byte", func(t *testing.T) {
		o, ann := choose(c, previous, v2)
		if o.AgentImage != "dolphin:v1" || o.TemplateGeneration != generationInitial {
			t.Fatalf("got %+v; want dolphin:v1 at generation 1 kept (no restart)", o)
		}
		if ann[TemplateGenerationAnnotation] != "1" || ann[SpecTemplateHashAnnotation] != h1 || ann[AgentProtocolAnnotation] != "1" {
			t.Errorf("annotations %v; want generation 1 recorded, hash %s, protocol 1", ann, h1)
		}
		if got, want := templateJSON(t, c, o), templateJSON(t, c, v1); got != want {
			t.Errorf("the kept template differs from the live one:\n got %s\nwant %s", got, want)
		}
	})
	t.Run("written before the hash was recorded: kept too", func(t *testing.T) {
		bare := liveStatefulSet(t, c, v1, nil)
		if o, ann := choose(c, bare, v2); o.AgentImage != "dolphin:v1" || o.TemplateGeneration != 1 || ann[AgentProtocolAnnotation] != "1" {
			t.Errorf("got %+v %v; want dolphin:v1 at generation 1 kept", o, ann)
		}
	})
	t.Run("the same agent image (dolphin local): the generation is kept alone", func(t *testing.T) {
		same := liveStatefulSet(t, c, BuildOptions{AgentImage: "dolphin:v2", TemplateGeneration: 1}, map[string]string{SpecTemplateHashAnnotation: h1})
		if o, ann := choose(c, same, v2); o.AgentImage != "dolphin:v2" || o.TemplateGeneration != 1 || ann[TemplateGenerationAnnotation] != "1" {
			t.Errorf("got %+v %v; want generation 1 kept", o, ann)
		}
	})
	t.Run("a spec change that changes the template brings the newest generation and image", func(t *testing.T) {
		changed := c.DeepCopy()
		changed.Spec.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}}
		o, ann := choose(changed, previous, v2)
		hc, _ := SpecTemplateHash(changed, TemplateGeneration)
		if o != newest || ann[SpecTemplateHashAnnotation] != hc || ann[TemplateGenerationAnnotation] != newestGeneration {
			t.Errorf("got %+v %v; want %+v with hash %s", o, ann, newest, hc)
		}
		if !supervised(liveStatefulSet(t, changed, o, nil)) {
			t.Error("the newest template does not run the server under crashOnStop")
		}
	})
	t.Run("an agent too old for this operator: the newest generation", func(t *testing.T) {
		old := previous.DeepCopy()
		old.Annotations[AgentProtocolAnnotation] = "0"
		if o, _ := choose(c, old, v2); o != newest {
			t.Errorf("an agent of protocol 0: %+v, want %+v", o, newest)
		}
		old.Annotations[AgentProtocolAnnotation] = "x"
		if o, _ := choose(c, old, v2); o != newest {
			t.Errorf("an unreadable agent protocol: %+v, want %+v", o, newest)
		}
	})
	t.Run("a generation this build cannot make: the newest", func(t *testing.T) {
		for _, g := range []string{strconv.Itoa(TemplateGeneration + 1), "0", "two"} {
			future := previous.DeepCopy()
			future.Annotations[TemplateGenerationAnnotation] = g
			if o, ann := choose(c, future, v2); o != newest || ann[TemplateGenerationAnnotation] != newestGeneration {
				t.Errorf("generation %q: %+v %v, want %+v", g, o, ann, newest)
			}
		}
	})
	t.Run("the newest generation stays", func(t *testing.T) {
		_, ann := choose(c, nil, BuildOptions{AgentImage: "dolphin:v2"})
		current := liveStatefulSet(t, c, newest, ann)
		if o, ann2 := choose(c, current, BuildOptions{AgentImage: "dolphin:v3"}); o.AgentImage != "dolphin:v2" || o.TemplateGeneration != TemplateGeneration || ann2[SpecTemplateHashAnnotation] != hNewest {
			t.Errorf("got %+v %v; want dolphin:v2 at generation %d kept", o, ann2, TemplateGeneration)
		}
	})
	t.Run("generation 2 is kept across an upgrade to a build with a newer one", func(t *testing.T) {
		g2 := BuildOptions{AgentImage: "dolphin:v2", TemplateGeneration: generationCrashOnStop}
		live := liveStatefulSet(t, c, g2, map[string]string{SpecTemplateHashAnnotation: h2, AgentProtocolAnnotation: "1", TemplateGenerationAnnotation: "2"})
		o, ann := choose(c, live, BuildOptions{AgentImage: "dolphin:v3"})
		if o.AgentImage != "dolphin:v2" || o.TemplateGeneration != generationCrashOnStop || ann[SpecTemplateHashAnnotation] != h2 {
			t.Errorf("got %+v %v; want dolphin:v2 at generation 2 kept (no restart)", o, ann)
		}
		if got, want := templateJSON(t, c, o), templateJSON(t, c, g2); got != want {
			t.Errorf("the kept generation-2 template differs from the live one:\n got %s\nwant %s", got, want)
		}
	})
	t.Run("the agent image does not enter the hash", func(t *testing.T) {
		if _, ann := choose(c, previous, BuildOptions{AgentImage: "dolphin:v9"}); ann[SpecTemplateHashAnnotation] != h1 {
			t.Errorf("hash %s, want %s", ann[SpecTemplateHashAnnotation], h1)
		}
	})
}

// TestTemplateGenerationsAreFrozen: a released generation's template never changes, or the
// StatefulSets that record it would roll on the next operator upgrade (the hash no longer
// matches). The generation-1 hashes were computed by the builder before generations existed
// (commit cc075c4). A failure here means: add a generation, do not change an old one.
func TestTemplateGenerationsAreFrozen(t *testing.T) {
	tls := minimal()
	tls.Spec.TLS.Enabled = true
	single := minimal()
	single.Spec.Instances = 1
	for _, tc := range []struct {
		name       string
		c          *dolphinv1.MySQLCluster
		generation int
		want       string
	}{
		{"minimal", minimal(), 1, "cfe0aae32ec1b8b3"},
		{"customised (mysql)", customised(), 1, "9e487a8b0ff48ffa"},
		{"restored", restored(), 1, "d446850859561921"},
		{"tls", tls, 1, "ec587a9397c85693"},
		{"single instance", single, 1, "535588b9a90fd8da"},
		// Generation 2 changes only multi-instance MariaDB clusters.
		{"customised (mysql)", customised(), 2, "9e487a8b0ff48ffa"},
		{"single instance", single, 2, "535588b9a90fd8da"},
		{"minimal", minimal(), 2, "ebb65bb9665e26f2"},
		{"restored", restored(), 2, "424e5501634c04e6"},
		{"tls", tls, 2, "0117528ae99a75de"},
		// Generation 3 changes only multi-instance MariaDB clusters too.
		{"customised (mysql)", customised(), 3, "9e487a8b0ff48ffa"},
		{"single instance", single, 3, "535588b9a90fd8da"},
		{"minimal", minimal(), 3, "f8cf070f1a0c6078"},
		{"restored", restored(), 3, "1e0f2d285dadac73"},
		{"tls", tls, 3, "55282fcc29a0c3d5"},
		// Generation 4 changes clusters of more than one instance only.
		{"single instance", single, 4, "535588b9a90fd8da"},
		{"minimal", minimal(), 4, "2a801fbd91018240"},
		{"customised (mysql)", customised(), 4, "1ae6de607fe528e6"},
		{"restored", restored(), 4, "9c666cf0783afb66"},
		{"tls", tls, 4, "360f1a1ce9306188"},
		// Generation 5 changes every cluster (the probes' timings).
		{"single instance", single, 5, "163490aaa9b10c3e"},
		{"minimal", minimal(), 5, "29b17d1504d54e4e"},
		{"customised (mysql)", customised(), 5, "ef0876c2d2244d02"},
		{"restored", restored(), 5, "384a112eb6928a8f"},
		{"tls", tls, 5, "6581084ecccc36f0"},
		// Generation 6 changes every cluster (the seed writes the per-instance config).
		{"single instance", single, 6, "8b046aec5387555d"},
		{"minimal", minimal(), 6, "fdb440c8e451453f"},
		{"customised (mysql)", customised(), 6, "6a429e088c889183"},
		{"restored", restored(), 6, "49d7af6bafad36ad"},
		{"tls", tls, 6, "77bc0f798eb6a507"},
		// Generation 7 changes only multi-instance MariaDB clusters (the start-up refusal).
		{"single instance", single, 7, "8b046aec5387555d"},
		{"customised (mysql)", customised(), 7, "6a429e088c889183"},
		{"minimal", minimal(), 7, "3d2daa50321b293d"},
		{"restored", restored(), 7, "5512629eb9c5f0f1"},
		{"tls", tls, 7, "8a233a1da0dd639e"},
	} {
		got, err := SpecTemplateHash(tc.c, tc.generation)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s at generation %d: hash %s, want %s", tc.name, tc.generation, got, tc.want)
		}
	}
}

// TestQuickProbesKeepTheirLimits: generation 5 probes every second, but a server or agent
// that stops answering leaves Ready after as long as before, and a recovering server is given
// as long before liveness takes over.
func TestQuickProbesKeepTheirLimits(t *testing.T) {
	old, quick := probesAt(generationHoldForSwitchover), probesAt(generationQuickProbes)
	for _, p := range []struct {
		name             string
		oldTotal, newTot int32
	}{
		{"server startup", old.serverStartupPeriod * old.serverStartupFailures, quick.serverStartupPeriod * quick.serverStartupFailures},
		{"server readiness", old.serverReadyPeriod * old.serverReadyFailures, quick.serverReadyPeriod * quick.serverReadyFailures},
		{"agent readiness", old.agentReadyPeriod * old.agentReadyFailures, quick.agentReadyPeriod * quick.agentReadyFailures},
	} {
		if p.oldTotal != p.newTot {
			t.Errorf("%s: %d s to fail at generation 5, %d s before", p.name, p.newTot, p.oldTotal)
		}
	}
	if quick.serverReadyPeriod != 1 || quick.agentReadyPeriod != 1 || quick.serverStartupPeriod != 1 {
		t.Errorf("generation 5 probes every %d/%d/%d s, want 1", quick.serverStartupPeriod, quick.serverReadyPeriod, quick.agentReadyPeriod)
	}
	// The StatefulSet built at generation 5 carries them.
	sts, err := StatefulSet(minimal(), BuildOptions{AgentImage: "agent", TemplateGeneration: generationQuickProbes})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.ReadinessProbe == nil || c.ReadinessProbe.PeriodSeconds == nil || *c.ReadinessProbe.PeriodSeconds != 1 {
			t.Errorf("container %s: readiness probe %+v, want every second", *c.Name, c.ReadinessProbe)
		}
	}
}

// TestStartupRefusalOnlyWhereItBelongs: from generation 7 a multi-instance MariaDB server
// starts refusing application logins (mycnf.StartupLoginRefusal); a single instance, MySQL, an
// older generation start without it; a cluster that sets init_connect itself has it too (its
// value comes back with the engine's run-time settings), so the setting restarts nothing.
func TestStartupRefusalOnlyWhereItBelongs(t *testing.T) {
	has := func(cmd []string) bool { return slices.Contains(cmd, "--init-connect="+mycnf.StartupLoginRefusal) }
	if !has(serverCommand(minimal(), generationStartupRefusal)) {
		t.Errorf("a 3-instance MariaDB cluster at generation %d starts without the refusal: %v", generationStartupRefusal, serverCommand(minimal(), generationStartupRefusal))
	}
	single := minimal()
	single.Spec.Instances = 1
	own := minimal()
	own.Spec.MySQLConfig = map[string]dolphinv1.MySQLConfigValue{"init_connect": "SET NAMES utf8mb4"}
	if !slices.Equal(serverCommand(own, generationStartupRefusal), serverCommand(minimal(), generationStartupRefusal)) {
		t.Errorf("configuring init_connect changes the server's command (a restart): %v", serverCommand(own, generationStartupRefusal))
	}
	for name, cmd := range map[string][]string{
		"single instance": serverCommand(single, generationStartupRefusal),
		"mysql":           serverCommand(customised(), generationStartupRefusal),
		"generation 6":    serverCommand(minimal(), generationSeedConfiguresInstance),
	} {
		for _, a := range cmd {
			if strings.HasPrefix(a, "--init-connect=") {
				t.Errorf("%s: starts with %q", name, a)
			}
		}
	}
}
