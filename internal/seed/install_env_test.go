package seed

import (
	"slices"
	"testing"
)

// The install script sees DOLPHIN_NOSYNC only as the seed sets it: a value inherited from the
// container's environment never reaches it, and none is set when the seed has no binary.
func TestInstallEnvNosync(t *testing.T) {
	environ := []string{"PATH=/bin", NosyncEnv + "=/inherited", "DOLPHIN_OPERATOR_USER=dolphin"}
	if got, want := installEnv(environ, "/opt/dolphin/dolphin"), []string{"PATH=/bin", "DOLPHIN_OPERATOR_USER=dolphin", NosyncEnv + "=/opt/dolphin/dolphin"}; !slices.Equal(got, want) {
		t.Errorf("with a binary: %q, want %q", got, want)
	}
	if got, want := installEnv(environ, ""), []string{"PATH=/bin", "DOLPHIN_OPERATOR_USER=dolphin"}; !slices.Equal(got, want) {
		t.Errorf("without: %q, want %q", got, want)
	}
	if environ[1] != NosyncEnv+"=/inherited" {
		t.Errorf("installEnv changed its argument: %q", environ)
	}
}
