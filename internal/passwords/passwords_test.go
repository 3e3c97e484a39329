package passwords

import (
	"strings"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/resources"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		password, user string
		problem        string // "" = accepted
	}{
		{"Tr0ub4dor&3-horse", "app", ""},
		{"correct horse battery staple", "app", ""}, // a passphrase: one kind of letter, long
		{"q8#Lm2vX!pR4", "", ""},
		{"short1A!", "", "it has 8 characters"},
		{"alllowercaseletters", "", "it uses 1 kind(s) of characters"},
		{"Password123!", "", "common password"},
		{"??P@ssw0rd123", "", "common password"}, // letters swapped for symbols are still the word
		{"2024Welcome!!", "", "common password"},
		{"123456789012", "", "it uses 1 kind(s) of characters"},
		{"aaaaaaaaaaaaaaaaaaaaaaaa", "", "one character repeated"},
		{"abcdefghijklmnopqrstuvwxyz", "", "a run like"},
		{"shop-App-2024!x", "shop-app", "contains the user name"},
		{"", "", "the password is empty"},
		{strings.Repeat("x", 300), "", "at most 256"},
	} {
		err := Check(tc.password, tc.user)
		switch {
		case tc.problem == "" && err != nil:
			t.Errorf("%q refused: %v", tc.password, err)
		case tc.problem != "" && err == nil:
			t.Errorf("%q accepted; want %q", tc.password, tc.problem)
		case tc.problem != "" && !strings.Contains(err.Error(), tc.problem):
			t.Errorf("%q: %v; want %q", tc.password, err, tc.problem)
		case err != nil && len(tc.password) > 0 && len(tc.password) < 256 && !strings.Contains(err.Error(), Requirement):
			t.Errorf("%q: the message does not say what is required: %v", tc.password, err)
		}
	}
}

// Dolphin's own generated passwords pass its own rule.
func TestGeneratedPasswordsPass(t *testing.T) {
	for range 200 {
		if pw := resources.NewPassword(); Check(pw, "") != nil {
			t.Fatalf("generated password %q refused: %v", pw, Check(pw, ""))
		}
	}
}
